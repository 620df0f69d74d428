//! Errors of the event DSL. Every error that comes from a definition file names the file, the
//! line and column (1-based, columns counted in characters) and the offending token.

use std::path::PathBuf;

/// Where in a definition file something is: file name as given, 1-based line and column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pos {
    /// The file name as the user gave it (or `<string>` for text without a file).
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub col: usize,
}

impl std::fmt::Display for Pos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}

/// An error while reading, parsing or compiling definitions.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DslError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A token that does not fit the grammar at that place.
    #[error("{pos}: {message} `{token}`{}", hint_text(hint))]
    Syntax {
        pos: Pos,
        message: String,
        token: String,
        hint: Option<String>,
    },
    /// Expressions nested deeper than [`MAX_DEPTH`](crate::MAX_DEPTH).
    #[error("{pos}: expression nested deeper than {limit} levels at `{token}`: split it into named definitions")]
    TooDeep {
        pos: Pos,
        token: String,
        limit: usize,
    },
    /// A definition refers to itself, directly or through others.
    #[error("{pos}: definition `{name}` depends on itself: {}", cycle.join(" -> "))]
    Cycle {
        pos: Pos,
        name: String,
        cycle: Vec<String>,
    },
    /// The same name defined twice where the format forbids it.
    #[error("{pos}: `{name}` is already defined at line {first_line}: rename one of them")]
    Duplicate {
        pos: Pos,
        name: String,
        first_line: usize,
    },
    /// The format of a file could not be told from its name or content.
    #[error("cannot tell the format of {file}: {why}; name it with --syntax {}", crate::Syntax::NAMES.join("|"))]
    UnknownSyntax { file: String, why: String },
    /// A `papi_events.csv` has no section for the CPU asked for.
    #[error("{file}: no `CPU,{cpu}` section; sections are: {available}")]
    NoSection {
        file: String,
        cpu: String,
        available: String,
    },
    /// A file of machine constants is malformed.
    #[error("{pos}: {message}")]
    Constants { pos: Pos, message: String },
}

fn hint_text(h: &Option<String>) -> String {
    match h {
        Some(h) => format!(": {h}"),
        None => String::new(),
    }
}

impl DslError {
    /// A syntax error at `pos`.
    pub(crate) fn syntax(
        pos: Pos,
        message: impl Into<String>,
        token: impl Into<String>,
        hint: Option<&str>,
    ) -> Self {
        DslError::Syntax {
            pos,
            message: message.into(),
            token: token.into(),
            hint: hint.map(str::to_string),
        }
    }

    /// The position the error refers to, when it has one.
    pub fn pos(&self) -> Option<&Pos> {
        match self {
            DslError::Syntax { pos, .. }
            | DslError::TooDeep { pos, .. }
            | DslError::Cycle { pos, .. }
            | DslError::Duplicate { pos, .. }
            | DslError::Constants { pos, .. } => Some(pos),
            _ => None,
        }
    }
}
