"""The compaction job's functional core (R11): ``plan_job`` plans a job from its inputs,
``finish_job`` turns each answer of the service's I/O into the next step, and the last
step is the job's typed outcome. The service only reads, calls and publishes."""
