-- Reads behind the admin panel (and any API client that pages): every list is a keyset range
-- of an index, never a scan and sort of the organization's rows. tests/schema checks the plans
-- of src/store/queries/{jobs_page,jobs_page_in_state,job_state_counts,runners_page,runner_claims}.sql.

-- GET /api/remote-runners/jobs?state=…: newest first within one state; also covers the
-- per-state counts, which read only this index.
CREATE INDEX jobs_by_organization_state ON jobs (organization_id, state, created_at, id);

-- GET /api/remote-runners?cursor=…: registration order with the id as the tie-break.
CREATE INDEX runners_page_order ON runners (organization_id, registered_at, id);
-- Its prefix, which the new index serves in its place.
DROP INDEX runners_by_organization;

-- GET /api/remote-runners/{id}/claims: a runner's claims newest first, whatever their state.
CREATE INDEX job_claims_by_runner_issued ON job_claims (runner_id, issued_at, id);
