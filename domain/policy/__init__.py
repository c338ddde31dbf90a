"""domain.policy.context_policy."""
