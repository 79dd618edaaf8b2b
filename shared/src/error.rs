//! The one error vocabulary of homebased (SPEC section 10): every failure a user can see has a
//! code, and each code maps to one CLI exit status and one HTTP status.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Every error code of SPEC section 10.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ErrorCode {
    InvalidSpec,
    InvalidQueueInput,
    InvalidCwd,
    MoveRefused,
    ThreadMismatch,
    Usage,
    ConfigInvalid,
    JobNotFound,
    ResourceNotFound,
    AttentionNotFound,
    TaskNotFound,
    MachineNotFound,
    ExecutableMissing,
    Permission,
    JobConflict,
    OperationConflict,
    ResourceConflict,
    JobTerminal,
    StaleRun,
    DaemonAlreadyRunning,
    JobsInFlight,
    /// A forwarded request named another machine than the one that received it.
    MachineIdentityMismatch,
    /// Two Fleet peers share the name a request used.
    DuplicateMachineName,
    DaemonUnavailable,
    MachineUnavailable,
    /// The database is locked by another process, full, or failing to write: nothing was
    /// changed, and the same request may succeed in a moment.
    StorageUnavailable,
    /// The store failed its check at start: the daemon refused to serve and changed nothing.
    StorageDamaged,
    Internal,
}

impl ErrorCode {
    /// The CLI exit status: 1 error, 2 usage or bad input, 3 not found, 4 permission, 5 conflict.
    pub fn exit_code(self) -> i32 {
        use ErrorCode::*;
        match self {
            InvalidSpec | InvalidQueueInput | InvalidCwd | MoveRefused | ThreadMismatch | Usage
            | ConfigInvalid => 2,
            JobNotFound | ResourceNotFound | AttentionNotFound | TaskNotFound | MachineNotFound
            | ExecutableMissing => 3,
            Permission => 4,
            JobConflict
            | OperationConflict
            | ResourceConflict
            | JobTerminal
            | StaleRun
            | DaemonAlreadyRunning
            | JobsInFlight
            | MachineIdentityMismatch
            | DuplicateMachineName => 5,
            DaemonUnavailable | MachineUnavailable | StorageUnavailable | StorageDamaged
            | Internal => 1,
        }
    }

    /// The HTTP status the API answers with for this code.
    pub fn http_status(self) -> u16 {
        match self.exit_code() {
            2 => 400,
            3 => 404,
            4 => 403,
            5 => 409,
            _ => match self {
                ErrorCode::MachineUnavailable
                | ErrorCode::DaemonUnavailable
                | ErrorCode::StorageUnavailable => 503,
                _ => 500,
            },
        }
    }

    /// Whether the same request may succeed if simply tried again later.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::DaemonUnavailable
                | ErrorCode::MachineUnavailable
                | ErrorCode::StorageUnavailable
        )
    }

    /// The name on the wire: serde's, derived by strum.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// An error as users see it: the `error` object of the JSON envelope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub retryable: bool,
    /// The offending input (a JSON pointer and value, a reason, an id); `null` when none.
    #[serde(default)]
    pub input: Value,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            retryable: code.retryable(),
            input: Value::Null,
        }
    }

    pub fn with_input(mut self, input: Value) -> Self {
        self.input = input;
        self
    }

    pub fn internal(message: impl std::fmt::Display) -> Self {
        ApiError::new(ErrorCode::Internal, message.to_string())
    }

    pub fn usage(message: impl Into<String>) -> Self {
        ApiError::new(ErrorCode::Usage, message)
    }

    /// The full envelope printed on stderr and sent as an HTTP error body.
    pub fn envelope(&self) -> Value {
        serde_json::json!({ "api_version": crate::API_VERSION, "error": self })
    }
}

/// The envelope as it arrives over the wire.
#[derive(Debug, Deserialize)]
pub struct ErrorEnvelope {
    pub error: ApiError,
}

pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_named_as_serde_names_it() {
        for &code in <ErrorCode as strum::VariantArray>::VARIANTS {
            assert_eq!(
                serde_json::to_value(code).ok(),
                Some(serde_json::json!(code.as_str()))
            );
        }
        assert_eq!(
            ErrorCode::MachineIdentityMismatch.as_str(),
            "machine_identity_mismatch"
        );
    }

    #[test]
    fn exit_codes_follow_the_spec_table() {
        assert_eq!(ErrorCode::InvalidSpec.exit_code(), 2);
        assert_eq!(ErrorCode::JobNotFound.exit_code(), 3);
        assert_eq!(ErrorCode::Permission.exit_code(), 4);
        assert_eq!(ErrorCode::DaemonAlreadyRunning.exit_code(), 5);
        assert_eq!(ErrorCode::DaemonUnavailable.exit_code(), 1);
        assert_eq!(ErrorCode::Internal.http_status(), 500);
        assert_eq!(ErrorCode::MoveRefused.http_status(), 400);
        assert_eq!(ErrorCode::MachineUnavailable.http_status(), 503);
        assert!(ErrorCode::DaemonUnavailable.retryable());
        assert!(!ErrorCode::JobConflict.retryable());
        assert_eq!(ErrorCode::StorageUnavailable.exit_code(), 1);
        assert_eq!(ErrorCode::StorageUnavailable.http_status(), 503);
        assert!(ErrorCode::StorageUnavailable.retryable());
        assert_eq!(ErrorCode::StorageDamaged.exit_code(), 1);
        assert!(!ErrorCode::StorageDamaged.retryable());
    }

    #[test]
    fn code_names_match_their_serde_form() {
        for code in [
            ErrorCode::InvalidQueueInput,
            ErrorCode::JobsInFlight,
            ErrorCode::StaleRun,
            ErrorCode::StorageUnavailable,
            ErrorCode::StorageDamaged,
            ErrorCode::MachineIdentityMismatch,
            ErrorCode::DuplicateMachineName,
        ] {
            assert_eq!(
                serde_json::to_value(code).unwrap(),
                Value::String(code.as_str().into())
            );
        }
    }
}
