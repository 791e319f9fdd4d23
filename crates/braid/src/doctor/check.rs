//! One finding of `braid doctor`, and how it came out.

use serde::Serialize;

/// How a check came out; ordered so the worst of a set is its maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Fail => "fail",
        }
    }
}

/// One finding, and for `warn`/`fail` what to do about it and why.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// What was checked (`cpu`, `socket buffers`, `peer AbCdEfGh… path line1`).
    pub check: String,
    pub level: Level,
    pub finding: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advice: Option<String>,
}

impl Check {
    pub fn ok(check: impl Into<String>, finding: impl Into<String>) -> Check {
        Check {
            check: check.into(),
            level: Level::Ok,
            finding: finding.into(),
            advice: None,
        }
    }

    pub fn warn(
        check: impl Into<String>,
        finding: impl Into<String>,
        advice: impl Into<String>,
    ) -> Check {
        Check {
            check: check.into(),
            level: Level::Warn,
            finding: finding.into(),
            advice: Some(advice.into()),
        }
    }

    pub fn fail(
        check: impl Into<String>,
        finding: impl Into<String>,
        advice: impl Into<String>,
    ) -> Check {
        Check {
            level: Level::Fail,
            ..Check::warn(check, finding, advice)
        }
    }
}
