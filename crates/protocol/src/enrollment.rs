//! Who may enroll a key-pair runner in an organization, and the tokens that admit one: the
//! organization's policy and a token's state, by the names the schema and the API carry.

use crate::wire_name::wire_names;

wire_names! {
    /// An organization's enrollment policy (`organizations.enrollment_policy`, `policy` of the
    /// enrollment policy API).
    pub enum EnrollmentPolicy: "an enrollment policy" {
        /// Anyone may enroll; an admin approves each runner by fingerprint.
        Open = "open",
        /// Only an enrollment presenting a live token of the organization.
        Token = "token",
        /// No enrollment at all.
        Closed = "closed",
    }
}

wire_names! {
    /// An enrollment token's state at a moment (`state` of a token in the API; not stored: it
    /// follows from the token's row and the clock, [`TokenState::at`]).
    pub enum TokenState: "an enrollment token state" {
        /// It admits enrollments.
        Live = "live",
        /// It admitted as many as it may.
        UsedUp = "used_up",
        /// Its time is up.
        Expired = "expired",
        /// An admin revoked it.
        Revoked = "revoked",
    }
}

impl TokenState {
    /// The state of a token that admitted `uses` of `max_uses`, expiring at `expires_at_ms`,
    /// revoked or not, at `now_ms`: a revocation first, then its uses, then its time.
    pub fn at(revoked: bool, uses: i64, max_uses: i64, expires_at_ms: i64, now_ms: i64) -> Self {
        if revoked {
            Self::Revoked
        } else if uses >= max_uses {
            Self::UsedUp
        } else if now_ms >= expires_at_ms {
            Self::Expired
        } else {
            Self::Live
        }
    }

    /// What an admin may do to a token in this state: revoke it, until it is revoked.
    pub fn actions(self) -> Vec<&'static str> {
        match self {
            Self::Revoked => Vec::new(),
            Self::Live | Self::UsedUp | Self::Expired => vec!["revoke"],
        }
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::wire_name::assert_round_trips;

    #[test]
    fn policies_and_token_states_round_trip_by_name() {
        assert_round_trips(
            EnrollmentPolicy::ALL,
            EnrollmentPolicy::as_str,
            EnrollmentPolicy::parse,
        );
        assert_eq!(EnrollmentPolicy::parse("Open"), None);
        assert_round_trips(TokenState::ALL, TokenState::as_str, TokenState::parse);
    }

    #[test]
    fn a_revocation_outranks_the_uses_which_outrank_the_time() {
        let now = 1_000;
        assert_eq!(TokenState::at(true, 1, 1, now, now), TokenState::Revoked);
        assert_eq!(TokenState::at(false, 1, 1, now, now), TokenState::UsedUp);
        assert_eq!(TokenState::at(false, 0, 1, now, now), TokenState::Expired);
        assert_eq!(TokenState::at(false, 0, 1, now + 1, now), TokenState::Live);
        assert_eq!(TokenState::Revoked.actions(), Vec::<&str>::new());
        assert_eq!(TokenState::Expired.actions(), ["revoke"]);
    }
}
