//! Loading a plugin library and making instances of it: the descriptor is checked once, here,
//! and every refusal is one [`LoadError`] line.

use std::ffi::{CStr, c_char};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use libloading::Library;

use crate::abi::{self, InstancePtr, RawPlugin};
use crate::error::{ErrorCounts, ErrorKind, LoadError, PluginError};

/// Room for a failed `create`'s message; longer ones are cut.
const CREATE_ERROR_CAPACITY: usize = 512;
/// A plugin's error message is printed on one line of at most this many characters.
const MESSAGE_MAX_CHARS: usize = 400;

/// A loaded plugin library. Instances keep it loaded (they hold an `Arc` of it), so it is
/// unloaded only after the last one is destroyed.
#[derive(Clone)]
pub struct Plugin {
    loaded: Arc<Loaded>,
}

struct Loaded {
    path: PathBuf,
    name: Arc<str>,
    version: String,
    functions: Functions,
    // Last field: dropped after everything read from the library.
    _library: Library,
}

/// The descriptor's function pointers, copied out of it at load.
#[derive(Clone, Copy)]
pub(crate) struct Functions {
    create: abi::CreateFn,
    destroy: abi::DestroyFn,
    last_error: abi::LastErrorFn,
    pub decode: Option<abi::DecodeFn>,
    pub aggregate: Option<abi::AggregateFn>,
    pub process_fragments: Option<abi::ProcessFragmentsFn>,
    pub filter_events: Option<abi::FilterEventsFn>,
}

impl Plugin {
    /// Loads the library at `path` and checks its descriptor: entry symbol, ABI version,
    /// descriptor size, name and the required functions.
    pub fn load(path: impl AsRef<Path>) -> Result<Plugin, LoadError> {
        let path = path.as_ref().to_path_buf();
        if !path.exists() {
            return Err(LoadError::Missing { path });
        }
        // A bare file name would make dlopen search the library path instead of loading the
        // file that was just found here.
        let load_path = if path.components().count() == 1 {
            Path::new(".").join(&path)
        } else {
            path.clone()
        };
        // SAFETY: loading a library runs its initialisers, which nothing on the host side can
        // check: loading a plugin is trusting its native code (the header says so, and the
        // operator names the file).
        let library = unsafe { Library::new(&load_path) }.map_err(|e| LoadError::NotLoadable {
            path: path.clone(),
            reason: one_line(&e.to_string()),
        })?;
        let symbol = "swdaq_plugin_v1";
        // SAFETY: the symbol's type is the header's `swdaq_plugin_entry_fn`; a library that
        // exports this name with another type breaks the ABI, which no host can detect.
        let entry: abi::EntryFn = match unsafe { library.get::<abi::EntryFn>(abi::ENTRY_SYMBOL) } {
            Ok(entry) => *entry,
            Err(_) => return Err(LoadError::NoEntrySymbol { path, symbol }),
        };
        // SAFETY: the entry function takes nothing and returns a pointer to static data.
        let descriptor = unsafe { entry() };
        if descriptor.is_null() {
            return Err(LoadError::NullDescriptor { path, symbol });
        }
        // SAFETY: every ABI version starts with `abi_version` and `struct_size` (two u32), so
        // these 8 bytes are there whatever version the plugin was built for.
        let (got, size) = unsafe {
            let header = descriptor.cast::<u32>();
            (header.read_unaligned(), header.add(1).read_unaligned())
        };
        if got != abi::ABI_VERSION {
            return Err(LoadError::AbiMismatch {
                path,
                got,
                want: abi::ABI_VERSION,
            });
        }
        if (size as usize) < size_of::<RawPlugin>() {
            return Err(LoadError::DescriptorTooSmall {
                path,
                got: size,
                want: size_of::<RawPlugin>(),
            });
        }
        // SAFETY: a version-1 descriptor of at least our size: every field we read is there.
        let raw = unsafe { &*descriptor };
        let missing = |what| LoadError::MissingField {
            path: path.clone(),
            what,
        };
        let name = c_text(raw.name).ok_or_else(|| missing("name"))?;
        let version = c_text(raw.version).unwrap_or_default();
        let functions = Functions {
            create: raw.create.ok_or_else(|| missing("create"))?,
            destroy: raw.destroy.ok_or_else(|| missing("destroy"))?,
            last_error: raw.last_error.ok_or_else(|| missing("last_error"))?,
            decode: raw.decode,
            aggregate: raw.aggregate,
            process_fragments: raw.process_fragments,
            filter_events: raw.filter_events,
        };
        let loaded = Loaded {
            path,
            name: name.into(),
            version,
            functions,
            _library: library,
        };
        Ok(Plugin {
            loaded: Arc::new(loaded),
        })
    }

    /// The name the plugin gives itself.
    pub fn name(&self) -> &str {
        &self.loaded.name
    }

    /// The plugin's own version string.
    pub fn version(&self) -> &str {
        &self.loaded.version
    }

    pub(crate) fn functions(&self) -> Functions {
        self.loaded.functions
    }

    /// Refuses a capability the plugin does not provide.
    pub(crate) fn require<T>(
        &self,
        function: Option<T>,
        capability: &'static str,
    ) -> Result<T, LoadError> {
        function.ok_or_else(|| LoadError::NoCapability {
            path: self.loaded.path.clone(),
            capability,
        })
    }

    /// Makes an instance with `config_toml`, the plugin's own TOML table as text.
    pub(crate) fn instance(&self, config_toml: &str) -> Result<Instance, LoadError> {
        let mut message = [0u8; CREATE_ERROR_CAPACITY];
        // SAFETY: the config pointer and length describe a live &str for the call; the error
        // buffer is ours with its true capacity; the header asks the plugin to write at most
        // that many bytes.
        let pointer = unsafe {
            (self.loaded.functions.create)(
                config_toml.as_ptr().cast::<c_char>(),
                config_toml.len(),
                message.as_mut_ptr().cast::<c_char>(),
                message.len(),
            )
        };
        if pointer.is_null() {
            let end = message
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(message.len());
            let text = one_line(&String::from_utf8_lossy(&message[..end]));
            let text = if text.is_empty() {
                "no message".to_string()
            } else {
                text
            };
            return Err(LoadError::CreateFailed {
                path: self.loaded.path.clone(),
                message: text,
            });
        }
        Ok(Instance {
            plugin: self.clone(),
            pointer,
            counts: ErrorCounts::default(),
        })
    }
}

/// One instance of a plugin: made by `create`, destroyed on drop, counting its failed calls.
pub(crate) struct Instance {
    plugin: Plugin,
    pub pointer: InstancePtr,
    pub counts: ErrorCounts,
}

// SAFETY: the header allows an instance to move between threads as long as calls on it are
// never concurrent; `Instance` is not `Sync` and every call takes `&mut self`, so they are not.
unsafe impl Send for Instance {}

impl Instance {
    pub fn plugin_name(&self) -> &Arc<str> {
        &self.plugin.loaded.name
    }

    /// Counts an error of `kind` and names it with the plugin.
    pub fn fail(&mut self, kind: ErrorKind) -> PluginError {
        self.counts.count(&kind);
        PluginError {
            plugin: self.plugin.loaded.name.clone(),
            kind,
        }
    }

    /// The error for a status other than OK and "need room": the plugin's own message for
    /// `SWDAQ_ERROR`, an unknown status otherwise.
    pub fn status_error(&mut self, status: abi::Status) -> PluginError {
        if status != abi::ERROR {
            return self.fail(ErrorKind::UnknownStatus(status));
        }
        // SAFETY: the instance is live (destroyed only on drop) and no other call on it runs.
        let message = unsafe { (self.plugin.loaded.functions.last_error)(self.pointer) };
        let text = c_text(message).map(|m| one_line(&m)).unwrap_or_default();
        let text = if text.is_empty() {
            "no message".to_string()
        } else {
            text
        };
        self.fail(ErrorKind::Reported(text))
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: made by this plugin's `create`, destroyed exactly once, after its last call.
        unsafe { (self.plugin.loaded.functions.destroy)(self.pointer) }
    }
}

/// A nul-terminated string from the plugin, or `None` for NULL.
fn c_text(pointer: *const c_char) -> Option<String> {
    if pointer.is_null() {
        return None;
    }
    // SAFETY: the header asks for nul-terminated strings valid until the next call on the
    // instance (or static, for the descriptor's); we copy it at once.
    Some(
        unsafe { CStr::from_ptr(pointer) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// A message as one bounded line: a plugin's text must not break the host's log format.
fn one_line(text: &str) -> String {
    let line: String = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(MESSAGE_MAX_CHARS)
        .collect();
    line
}
