-- Last, the organization's requirements documents no archived job names any more
-- (requirement_documents_unused: at most the one the deleted job named).
-- ?1 organization id
DELETE FROM requirement_documents
    WHERE organization_number = (SELECT number FROM organization_numbers WHERE organization_id = ?1)
      AND jobs = 0
