"""domain.caching: the providers' prompt-cache rules, where our requests put their
breakpoints, and a replay of a session's requests under those rules."""
