# Sourced by deploy/postgres.sh and deploy/kafka.sh: the words that start a server under
# the stack's CPU scheduling policy, to put before its command.
# ALC_STACK_CPU=batch (default): SCHED_BATCH, like our services (ALC_SERVICE_CPU;
# streams/tuning/cpu_policy.py says why): a woken process does not preempt the one that
# woke it. normal: as scheduled. Nothing when chrt is missing or the policy is refused.
cpu_policy_prefix() {
  [[ ${ALC_STACK_CPU:-batch} == batch ]] || return 0
  if chrt -b 0 true 2>/dev/null; then echo "chrt -b 0"; fi
}
