-- The message of the records topic a dead-lettered event came in (its partition and
-- offset), kept with the refusal: the processor publishes a letter after the refusal
-- commits, and when that message is redelivered (the letter lost between the two) it
-- publishes the letter again, and only for that message (a valid event sent later under
-- a refused key stays a silent duplicate). NULL: a refusal that needs no second letter
-- (a rejected request, one refused at admission, which refuses its message again).
ALTER TABLE event_outcomes ADD COLUMN source_partition integer,
    ADD COLUMN source_offset bigint;
