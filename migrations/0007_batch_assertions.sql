-- Assertions a batch makes about rows it does not write, checked by D1 inside the batch.
--
-- A warm job object decides from what it already knows (the job's state, attempt, active
-- claim and lease, and the holder's credential generation as the credential states it) and
-- sends one batch: its writes, plus an assertion for each thing that can change behind its
-- back. A runner's rotation or revocation moves its credential generation; an operator (or a
-- test) can move a lease in D1 directly. `INSERT INTO batch_assertions (code, held) SELECT
-- '<code>', <condition>` stores nothing: the view's INSTEAD OF trigger aborts the whole batch
-- with the code when the condition does not hold, so the batch commits whole or not at all,
-- guarded by what D1 holds at that instant, never by a read made before it.
--
-- Codes (src/store/guards.rs answers each):
--   credential_revoked  the runner no longer holds this credential generation, or is revoked
--                       or not approved: the caller gets 401 and exchanges a new credential;
--   job_moved           the job is not in the state, attempt and claim (live at this instant)
--                       the object believed: the object reloads it from D1 and decides again;
--   runner_moved        the runner is not in the state an admin's change was decided from (a
--                       concurrent change landed first): the change is refused whole, 409.
-- An unknown code aborts too, so a misspelt assertion can never pass silently.
CREATE VIEW batch_assertions AS SELECT '' AS code, 1 AS held WHERE 0;

CREATE TRIGGER batch_assertion_credential_current
INSTEAD OF INSERT ON batch_assertions
WHEN NEW.code = 'credential_revoked' AND NEW.held IS NOT 1
BEGIN
    SELECT RAISE(ABORT, 'credential_revoked');
END;

CREATE TRIGGER batch_assertion_job_as_known
INSTEAD OF INSERT ON batch_assertions
WHEN NEW.code = 'job_moved' AND NEW.held IS NOT 1
BEGIN
    SELECT RAISE(ABORT, 'job_moved');
END;

CREATE TRIGGER batch_assertion_runner_as_known
INSTEAD OF INSERT ON batch_assertions
WHEN NEW.code = 'runner_moved' AND NEW.held IS NOT 1
BEGIN
    SELECT RAISE(ABORT, 'runner_moved');
END;

CREATE TRIGGER batch_assertion_code_is_known
INSTEAD OF INSERT ON batch_assertions
WHEN NEW.code NOT IN ('credential_revoked', 'job_moved', 'runner_moved')
BEGIN
    SELECT RAISE(ABORT, 'unknown_batch_assertion');
END;
