//! A file's root attributes, read tolerantly: each required one missing or of a type that
//! does not convert is named ([`AttributeProblem`]) and left `None`, and the file's records
//! are still read. Attribute types are interpreted in one place ([`value_of`]): integers of
//! any width and sign, variable-length strings; timestamps in both of hdf5libs' forms.
//!
//! Required, as hdf5libs reads them on demand and fails without them: `run_number`,
//! `file_index`, `creation_timestamp`, `application_name`. Optional, as hdf5libs opens a file
//! without them (`HDF5RawDataFile`'s read constructor): `recorded_size`, `record_type`,
//! `filelayout_version` (and `filelayout_params`, the JSON maps, which swdaq's reader does
//! not need), and `closing_timestamp`, absent while a file is being written; swdaq's
//! provenance (`swdaq_*`), absent from older files.

use crate::layout::attr;
use hdf5::types::{TypeDescriptor, VarLenAscii, VarLenUnicode};
use serde::Serialize;
use std::borrow::Cow;
use std::collections::BTreeMap;
use swdaq_format::provenance::{KEY_PREFIX, Provenance};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileAttributes {
    pub run_number: Option<u32>,
    pub file_index: Option<u64>,
    /// Milliseconds since the Unix epoch (an integer, or in hdf5libs v2.x files a string).
    pub creation_timestamp: Option<u64>,
    /// Absent while a file is still being written.
    pub closing_timestamp: Option<u64>,
    /// Bytes of records (headers and fragments); absent while a file is still being written.
    pub recorded_size: Option<u64>,
    pub application_name: Option<String>,
    /// Optional, as in hdf5libs.
    pub record_type: Option<String>,
    /// Optional, as in hdf5libs.
    pub filelayout_version: Option<u32>,
    /// swdaq's provenance attributes (`swdaq_version`, ...) by name without their prefix;
    /// empty in older files and DUNE's own. One that is not text is a problem.
    pub provenance: BTreeMap<String, String>,
    /// Attributes that are missing or do not read as their expected type, each named.
    pub problems: Vec<AttributeProblem>,
}

/// An attribute that could not be read as expected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttributeProblem {
    pub name: Cow<'static, str>,
    pub expected: &'static str,
    /// What the file holds instead: `missing`, or the type found.
    pub found: String,
}

/// The integer an attribute must hold.
#[derive(Clone, Copy)]
enum Form {
    U32,
    U64,
    Timestamp,
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
    let mut note = |name: Cow<'static, str>, expected: &'static str, found: String| {
        problems.push(AttributeProblem {
            name,
            expected,
            found,
        });
    };
    // `Form::Timestamp` also takes the decimal string hdf5libs wrote up to v2.8.0 (layout
    // version 5, `std::to_string` of the milliseconds); later versions write a `size_t`.
    let mut integer = |name: &'static str, form: Form| {
        let (max, expected) = match form {
            Form::U32 => (u64::from(u32::MAX), "unsigned 32-bit integer"),
            Form::U64 => (u64::MAX, "unsigned integer"),
            Form::Timestamp => (
                u64::MAX,
                "unsigned integer or decimal string (milliseconds)",
            ),
        };
        match value_of(file, name) {
            Ok(Value::Integer(v)) if (0..=i128::from(max)).contains(&v) => Some(v as u64),
            Ok(Value::Text(s)) if matches!(form, Form::Timestamp) && s.parse::<u64>().is_ok() => {
                s.parse().ok()
            }
            Ok(Value::Integer(v)) => {
                note(name.into(), expected, format!("{v}, out of range"));
                None
            }
            Ok(Value::Text(s)) => {
                note(name.into(), expected, format!("string {s:?}"));
                None
            }
            Err(found) => {
                note(name.into(), expected, found);
                None
            }
        }
    };
    // An optional attribute that is absent is `None` and no problem; present, it is checked.
    let present = |name: &str| file.attr(name).is_ok();
    let run_number = integer(attr::RUN_NUMBER, Form::U32).map(|v| v as u32);
    let file_index = integer(attr::FILE_INDEX, Form::U64);
    let creation_timestamp = integer(attr::CREATION_TIMESTAMP, Form::Timestamp);
    let filelayout_version = present(attr::LAYOUT_VERSION)
        .then(|| integer(attr::LAYOUT_VERSION, Form::U32).map(|v| v as u32))
        .flatten();
    let closing_timestamp = present(attr::CLOSING_TIMESTAMP)
        .then(|| integer(attr::CLOSING_TIMESTAMP, Form::Timestamp))
        .flatten();
    let recorded_size = present(attr::RECORDED_SIZE)
        .then(|| integer(attr::RECORDED_SIZE, Form::U64))
        .flatten();
    let mut text = |name: Cow<'static, str>| match value_of(file, &name) {
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
    let application_name = text(attr::APPLICATION_NAME.into());
    let record_type = present(attr::RECORD_TYPE)
        .then(|| text(attr::RECORD_TYPE.into()))
        .flatten();
    // Never required: a file without is an older one.
    let provenance = Provenance::text_names()
        .into_iter()
        .filter(|name| present(&format!("{KEY_PREFIX}{name}")))
        .filter_map(|name| {
            Some((
                name.to_string(),
                text(format!("{KEY_PREFIX}{name}").into())?,
            ))
        })
        .collect();
    FileAttributes {
        run_number,
        file_index,
        creation_timestamp,
        closing_timestamp,
        recorded_size,
        application_name,
        record_type,
        filelayout_version,
        provenance,
        problems,
    }
}
