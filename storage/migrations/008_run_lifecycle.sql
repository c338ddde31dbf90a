-- R1.2/R3.1: a run's lifecycle counters, kept by the session processor (the single
-- writer) in the transaction that accepts or refuses the lifecycle event. Prepare derives
-- the event keys of resume/finish/cancel from them (streams/planning.py::lifecycle_key),
-- so a restarted runtime's next resume is a new event while a retry of the same one is
-- still a duplicate — no client-local counter.
ALTER TABLE runs
    ADD COLUMN resumes         integer NOT NULL DEFAULT 0,  -- accepted run_resumed
    ADD COLUMN ends            integer NOT NULL DEFAULT 0,  -- accepted run_finished/_cancelled
    ADD COLUMN refused_resumes integer NOT NULL DEFAULT 0;  -- run_resumed refused

UPDATE runs u SET
    resumes = (SELECT count(*) FROM records r WHERE r.session_id = u.session_id
               AND r.run_id = u.run_id AND r.kind = 'run_resumed'),
    ends = (SELECT count(*) FROM records r WHERE r.session_id = u.session_id
            AND r.run_id = u.run_id AND r.kind IN ('run_finished', 'run_cancelled')),
    refused_resumes = (SELECT count(*) FROM event_outcomes o WHERE o.session_id = u.session_id
                       AND starts_with(o.event_key, 'run_resumed:' || u.run_id || ':'));
