//! (filled in by the change that adds these attacks)
