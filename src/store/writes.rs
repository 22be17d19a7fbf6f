//! A write batch that knows what each of its statements must change. A statement added with
//! [`Writes::one`] must change exactly one row (the batch's answer is an error naming it when
//! it did not: the schema's guards should have aborted the batch first, so this is the last
//! line, never a refusal); one added with [`Writes::any`] answers a [`Slot`] its count is read
//! by. Positions in the batch stay here: no caller reads a result by its index.

use std::ops::Range;

use serde::de::DeserializeOwned;
use worker::{D1PreparedStatement, D1Result};

use super::Db;
use crate::error::{ApiError, ApiResult};

/// A write batch being built: its statements in order, and what each must change.
#[derive(Default)]
pub(crate) struct Writes {
    statements: Vec<D1PreparedStatement>,
    expected: Expected,
}

/// What a batch's statements must change: `(position, what the statement writes)` of each
/// that must change exactly one row.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Expected(Vec<(usize, &'static str)>);

/// Where an [`Writes::any`] statement's count is read in the batch's [`Changed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot(usize);

/// Where statements added with [`Writes::read`] are answered in the batch's [`Changed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reads(Range<usize>);

/// What a batch's statements did: the rows each changed (read by [`Slot`]), and the results of
/// its reads (by [`Reads`]), which see the batch's own writes.
pub(crate) struct Changed {
    counts: Vec<usize>,
    results: Vec<D1Result>,
}

impl Writes {
    /// A statement that must change exactly one row: `what` names it in the error when not.
    pub(crate) fn one(&mut self, what: &'static str, statement: D1PreparedStatement) {
        self.expected.0.push((self.statements.len(), what));
        self.statements.push(statement);
    }

    /// A statement that may change any number of rows (its guard aborts the batch, or it
    /// changing nothing is a valid outcome), its count read at the answered [`Slot`].
    pub(crate) fn any(&mut self, statement: D1PreparedStatement) -> Slot {
        self.statements.push(statement);
        Slot(self.statements.len() - 1)
    }

    /// Statements that may change any number of rows, none of whose counts is read.
    pub(crate) fn extend(&mut self, statements: impl IntoIterator<Item = D1PreparedStatement>) {
        self.statements.extend(statements);
    }

    /// Reads at the end of the batch (they see its writes), answered together at [`Reads`].
    pub(crate) fn read(&mut self, statements: Vec<D1PreparedStatement>) -> Reads {
        let from = self.statements.len();
        self.statements.extend(statements);
        Reads(from..self.statements.len())
    }

    /// The statements, and what each must change (checked on the batch's counts of these
    /// statements alone, whatever a caller sends before them).
    pub(crate) fn into_parts(self) -> (Vec<D1PreparedStatement>, Expected) {
        (self.statements, self.expected)
    }
}

impl From<Vec<D1PreparedStatement>> for Writes {
    fn from(statements: Vec<D1PreparedStatement>) -> Self {
        Self {
            statements,
            expected: Expected::default(),
        }
    }
}

impl Expected {
    /// The batch's counts, checked: what went wrong, naming each statement that had to change
    /// one row and did not (or answered no count).
    pub(crate) fn check(&self, counts: &[usize]) -> Result<(), String> {
        let wrong: Vec<String> = self
            .0
            .iter()
            .filter_map(|&(at, what)| match counts.get(at) {
                Some(1) => None,
                Some(n) => Some(format!("{what} changed {n} rows")),
                None => Some(format!("{what} answered no count")),
            })
            .collect();
        if wrong.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "a write batch did not change what it decided: {}",
                wrong.join("; ")
            ))
        }
    }

    /// The batch's `results` (of these statements alone), checked.
    pub(crate) fn changed(&self, results: Vec<D1Result>) -> ApiResult<Changed> {
        let counts = results
            .iter()
            .map(super::changes)
            .collect::<ApiResult<Vec<usize>>>()?;
        self.check(&counts).map_err(ApiError::internal)?;
        Ok(Changed { counts, results })
    }
}

impl Changed {
    /// The rows the statement at `slot` changed.
    pub(crate) fn at(&self, slot: Slot) -> usize {
        self.counts.get(slot.0).copied().unwrap_or(0)
    }

    /// The rows the statement at `slot` answered (a `RETURNING` clause's).
    pub(crate) fn rows<T: DeserializeOwned>(&self, slot: Slot) -> ApiResult<Vec<T>> {
        match self.results.get(slot.0) {
            Some(result) => Ok(result.results()?),
            None => Err(ApiError::internal("a write batch answered too few results")),
        }
    }

    /// The results of the reads at `reads`.
    pub(crate) fn results(&self, reads: &Reads) -> &[D1Result] {
        self.results.get(reads.0.clone()).unwrap_or_default()
    }
}

/// Runs `writes` as one transaction ([`super::write_batch`]) and checks what they changed.
pub(crate) async fn write(db: &Db, writes: Writes) -> ApiResult<Changed> {
    let (statements, expected) = writes.into_parts();
    expected.changed(super::write_batch(db, statements).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expected(ones: &[(usize, &'static str)]) -> Expected {
        Expected(ones.to_vec())
    }

    #[test]
    fn a_batch_passes_when_every_one_row_statement_changed_one_row() {
        let check = expected(&[(1, "the job"), (2, "the claim")]);
        assert_eq!(check.check(&[0, 1, 1, 7]), Ok(()));
        assert_eq!(Expected::default().check(&[]), Ok(()));
    }

    #[test]
    fn a_one_row_statement_that_changed_none_or_many_fails_the_batch_by_name() {
        let check = expected(&[(0, "the job"), (1, "the claim"), (2, "the runner")]);
        let err = check.check(&[1, 0, 2]).unwrap_err();
        let text = err;
        assert!(text.contains("the claim changed 0 rows"), "{text}");
        assert!(text.contains("the runner changed 2 rows"), "{text}");
        assert!(!text.contains("the job"), "{text}");
        // A batch that answered fewer counts than it had statements.
        let err = check.check(&[1]).unwrap_err();
        assert!(err.contains("the claim answered no count"), "{err}");
    }
}
