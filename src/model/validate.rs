//! Collecting every validation problem of one value before reporting.

use crate::error::{Error, FieldProblem, InvalidArgument, Result};

/// Accumulates field problems; [`Problems::finish`] turns them into one error.
pub(crate) struct Problems {
    subject: &'static str,
    prefix: &'static str,
    list: Vec<FieldProblem>,
}

impl Problems {
    /// Problems of a value named `subject` (e.g. `IssueRequest`).
    pub(crate) fn new(subject: &'static str) -> Problems {
        Problems {
            subject,
            prefix: "",
            list: Vec::new(),
        }
    }

    /// Records a problem with `field` (a codec-name path relative to the prefix).
    pub(crate) fn push(&mut self, field: &str, problem: impl Into<String>) {
        let field = if self.prefix.is_empty() {
            field.to_string()
        } else {
            format!("{}.{field}", self.prefix)
        };
        self.list.push(FieldProblem {
            field,
            problem: problem.into(),
        });
    }

    /// Runs `f` with field paths prefixed by `prefix` (e.g. `Identity`).
    pub(crate) fn nested(&mut self, prefix: &'static str, f: impl FnOnce(&mut Problems)) {
        let outer = std::mem::replace(&mut self.prefix, prefix);
        f(self);
        self.prefix = outer;
    }

    /// Requires `value` to be non-empty.
    pub(crate) fn require(&mut self, field: &str, value: &str) {
        if value.is_empty() {
            self.push(field, "must not be empty");
        }
    }

    /// `Ok` when nothing was recorded, else one error listing every problem.
    pub(crate) fn finish(self) -> Result<()> {
        if self.list.is_empty() {
            Ok(())
        } else {
            Err(Error::InvalidArgument(InvalidArgument {
                subject: self.subject,
                problems: self.list,
            }))
        }
    }
}
