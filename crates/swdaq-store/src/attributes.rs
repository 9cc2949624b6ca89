//! A file's root attributes, read tolerantly: each one missing or of a type that does not
//! convert is named ([`AttributeProblem`]) and left `None`, and the file's records are
//! still read. Attribute types are interpreted in one place ([`value_of`]): integers of any
//! width and sign, variable-length strings; a further written form (DUNE's older files, say)
//! is one more arm there.

use crate::layout::attr;
use hdf5::types::{TypeDescriptor, VarLenAscii, VarLenUnicode};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileAttributes {
    pub run_number: Option<u32>,
    pub file_index: Option<u64>,
    /// Milliseconds since the Unix epoch.
    pub creation_timestamp: Option<u64>,
    /// Absent while a file is still being written.
    pub closing_timestamp: Option<u64>,
    /// Bytes of records (headers and fragments); absent while a file is still being written.
    pub recorded_size: Option<u64>,
    pub application_name: Option<String>,
    pub record_type: Option<String>,
    pub filelayout_version: Option<u32>,
    /// Attributes that are missing or do not read as their expected type, each named.
    pub problems: Vec<AttributeProblem>,
}

/// An attribute that could not be read as expected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttributeProblem {
    pub name: &'static str,
    pub expected: &'static str,
    /// What the file holds instead: `missing`, or the type found.
    pub found: String,
}

/// An attribute's value as written, before it is converted to the field's type.
enum Value {
    Integer(i128),
    Text(String),
}

/// Reads an attribute in whichever form it was written; `Err` says what was found instead.
fn value_of(file: &hdf5::File, name: &str) -> Result<Value, String> {
    let a = file.attr(name).map_err(|_| "missing".to_string())?;
    let kind = a
        .dtype()
        .and_then(|t| t.to_descriptor())
        .map_err(|e| format!("unreadable type ({e})"))?;
    if !a.is_scalar() {
        return Err(format!("{kind} array of shape {:?}", a.shape()));
    }
    let read_error = |e: hdf5::Error| format!("{kind} that does not read ({e})");
    match kind {
        TypeDescriptor::Integer(_) => a.read_scalar::<i64>().map(|v| Value::Integer(v.into())),
        TypeDescriptor::Unsigned(_) => a.read_scalar::<u64>().map(|v| Value::Integer(v.into())),
        TypeDescriptor::VarLenUnicode => a
            .read_scalar::<VarLenUnicode>()
            .map(|s| Value::Text(s.as_str().to_string())),
        TypeDescriptor::VarLenAscii => a
            .read_scalar::<VarLenAscii>()
            .map(|s| Value::Text(s.as_str().to_string())),
        other => return Err(other.to_string()),
    }
    .map_err(read_error)
}

/// Reads the root attributes of `file`, naming each one that is missing or of the wrong type.
pub(crate) fn read(file: &hdf5::File) -> FileAttributes {
    let mut problems = Vec::new();
    let mut note = |name: &'static str, expected: &'static str, found: String| {
        problems.push(AttributeProblem {
            name,
            expected,
            found,
        });
    };
    let mut integer = |name: &'static str, max: u64| {
        let expected = if max == u64::from(u32::MAX) {
            "unsigned 32-bit integer"
        } else {
            "unsigned integer"
        };
        match value_of(file, name) {
            Ok(Value::Integer(v)) if (0..=i128::from(max)).contains(&v) => Some(v as u64),
            Ok(Value::Integer(v)) => {
                note(name, expected, format!("{v}, out of range"));
                None
            }
            Ok(Value::Text(s)) => {
                note(name, expected, format!("string {s:?}"));
                None
            }
            Err(found) => {
                note(name, expected, found);
                None
            }
        }
    };
    let (u32_max, u64_max) = (u64::from(u32::MAX), u64::MAX);
    let run_number = integer(attr::RUN_NUMBER, u32_max).map(|v| v as u32);
    let file_index = integer(attr::FILE_INDEX, u64_max);
    let creation_timestamp = integer(attr::CREATION_TIMESTAMP, u64_max);
    let filelayout_version = integer(attr::LAYOUT_VERSION, u32_max).map(|v| v as u32);
    // Written only when the file is closed: absent is an open file, not a problem.
    let closed = file.attr(attr::CLOSING_TIMESTAMP).is_ok();
    let closing_timestamp = closed
        .then(|| integer(attr::CLOSING_TIMESTAMP, u64_max))
        .flatten();
    let recorded_size = closed
        .then(|| integer(attr::RECORDED_SIZE, u64_max))
        .flatten();
    let mut text = |name: &'static str| match value_of(file, name) {
        Ok(Value::Text(s)) => Some(s),
        Ok(Value::Integer(v)) => {
            note(name, "string", format!("integer {v}"));
            None
        }
        Err(found) => {
            note(name, "string", found);
            None
        }
    };
    let application_name = text(attr::APPLICATION_NAME);
    let record_type = text(attr::RECORD_TYPE);
    FileAttributes {
        run_number,
        file_index,
        creation_timestamp,
        closing_timestamp,
        recorded_size,
        application_name,
        record_type,
        filelayout_version,
        problems,
    }
}
