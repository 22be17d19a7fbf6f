-- store::enrollment::set_pending_caps: The caps the pending-enrollment triggers read, from this
-- Worker's configuration, written only when they differ (so a steady configuration costs no write).
UPDATE organizations SET max_pending_enrollments = ?2, max_pending_enrollments_per_network = ?3,
       max_pending_enrollments_per_site = ?4
    WHERE id = ?1 AND (max_pending_enrollments <> ?2 OR max_pending_enrollments_per_network <> ?3
                       OR max_pending_enrollments_per_site <> ?4)
