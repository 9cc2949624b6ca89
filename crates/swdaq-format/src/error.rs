//! The one error type every parser in this crate returns.

use thiserror::Error;

/// Why a byte buffer could not be read as the requested format.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FormatError {
    #[error("{what}: buffer holds {got} bytes, need {need}")]
    Truncated {
        what: &'static str,
        need: usize,
        got: usize,
    },
    #[error("{what}: bad magic 0x{got:08x}, expected 0x{expected:08x}")]
    BadMagic {
        what: &'static str,
        expected: u32,
        got: u32,
    },
    #[error("{what}: unsupported version {got}, this build reads version {supported}")]
    UnsupportedVersion {
        what: &'static str,
        supported: u32,
        got: u32,
    },
    /// The bytes may be fine, but this reader does not read their kind.
    #[error("{what}: not read here")]
    NotReadHere { what: &'static str },
    #[error("{what}: field {field} = {value} is inconsistent with the buffer")]
    Inconsistent {
        what: &'static str,
        field: &'static str,
        value: u64,
    },
}

/// Checks that `bytes` holds at least `need` bytes.
pub(crate) fn need(what: &'static str, bytes: &[u8], need: usize) -> Result<(), FormatError> {
    if bytes.len() < need {
        Err(FormatError::Truncated {
            what,
            need,
            got: bytes.len(),
        })
    } else {
        Ok(())
    }
}

/// Views `bytes` as exactly `N` bytes: shorter is `Truncated`, longer is `Inconsistent`.
pub(crate) fn exact<'a, const N: usize>(
    what: &'static str,
    bytes: &'a [u8],
) -> Result<&'a [u8; N], FormatError> {
    need(what, bytes, N)?;
    bytes.try_into().map_err(|_| FormatError::Inconsistent {
        what,
        field: "length",
        value: bytes.len() as u64,
    })
}
