//! The pool's typed errors for the calls that return a message: each names what failed, and its
//! text is the message a person reads (the HTTP route and the CLI show it unchanged).

/// A worker broke the frame protocol; the message says how.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ProtocolError(pub(crate) String);

/// No Python interpreter that can `import sluice._worker`; the message says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NoPython(pub(crate) String);

/// A code substream's file or function does not pass the check; the message is fit for the
/// person who registered it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CheckError(pub(crate) String);
