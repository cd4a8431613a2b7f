//! tracefs: where it is mounted (mounting it when needed) and the record layout of a tracepoint
//! from its `format` file.
use std::path::{Path, PathBuf};

/// Why tracefs or a format file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TracefsError {
    /// No tracefs mounted and mounting failed.
    #[error("tracefs is not mounted and mounting it at /sys/kernel/tracing failed: {0}")]
    NotMounted(String),
    /// The tracepoint does not exist on this kernel.
    #[error("tracepoint {0} not found in tracefs")]
    NoTracepoint(String),
    /// The format file lacks a field, or its size differs.
    #[error("tracepoint {tracepoint}: field {field} missing or not {size} bytes")]
    Field {
        /// Tracepoint.
        tracepoint: String,
        /// Field.
        field: String,
        /// Expected size.
        size: u32,
    },
}

/// A mounted tracefs.
#[derive(Debug, Clone)]
pub struct Tracefs {
    root: PathBuf,
}

/// A parsed `format` file: (name, offset, size) per field.
#[derive(Debug, Clone)]
pub struct Format {
    name: String,
    fields: Vec<(String, u32, u32)>,
}

impl Tracefs {
    /// Finds tracefs; mounts it at /sys/kernel/tracing when not mounted (needs root).
    pub fn find_or_mount() -> Result<Self, TracefsError> {
        if let Some(t) = Self::find() {
            return Ok(t);
        }
        let target = c"/sys/kernel/tracing";
        let fstype = c"tracefs";
        // SAFETY: constant NUL-terminated strings, null data.
        let rc = unsafe {
            libc::mount(
                fstype.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            return Err(TracefsError::NotMounted(
                std::io::Error::last_os_error().to_string(),
            ));
        }
        Self::find().ok_or_else(|| TracefsError::NotMounted("mounted but empty".into()))
    }

    /// Finds a mounted tracefs without mounting.
    pub fn find() -> Option<Self> {
        ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
            .iter()
            .map(Path::new)
            .find(|p| p.join("events").is_dir())
            .map(|p| Self {
                root: p.to_path_buf(),
            })
    }

    /// Where it is mounted.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// True when the tracepoint exists.
    pub fn has(&self, category: &str, name: &str) -> bool {
        self.root.join("events").join(category).join(name).is_dir()
    }

    /// Reads and parses `events/<category>/<name>/format`.
    pub fn format(&self, category: &str, name: &str) -> Result<Format, TracefsError> {
        let path = self
            .root
            .join("events")
            .join(category)
            .join(name)
            .join("format");
        let text = std::fs::read_to_string(&path)
            .map_err(|_| TracefsError::NoTracepoint(format!("{category}:{name}")))?;
        Ok(Format::parse(&format!("{category}:{name}"), &text))
    }
}

impl Format {
    /// Parses lines like `field:const void * skaddr;\toffset:16;\tsize:8;\tsigned:0;`.
    pub fn parse(name: &str, text: &str) -> Self {
        let mut fields = Vec::new();
        for line in text.lines() {
            let mut decl = None;
            let mut offset = None;
            let mut size = None;
            for part in line.split(';') {
                let part = part.trim();
                if let Some(d) = part.strip_prefix("field:") {
                    decl = Some(d);
                } else if let Some(o) = part.strip_prefix("offset:") {
                    offset = o.parse::<u32>().ok();
                } else if let Some(s) = part.strip_prefix("size:") {
                    size = s.parse::<u32>().ok();
                }
            }
            if let (Some(d), Some(o), Some(s)) = (decl, offset, size) {
                // The name is the last identifier, before any array suffix.
                let d = d.split('[').next().unwrap_or(d);
                if let Some(field) = d.split(|c: char| c.is_whitespace() || c == '*').next_back() {
                    fields.push((field.to_owned(), o, s));
                }
            }
        }
        Self {
            name: name.to_owned(),
            fields,
        }
    }

    /// Offset of `field`, checking that it has `size` bytes.
    pub fn offset_of(&self, field: &str, size: u32) -> Result<u32, TracefsError> {
        self.fields
            .iter()
            .find(|(n, _, s)| n == field && *s == size)
            .map(|(_, o, _)| *o)
            .ok_or_else(|| TracefsError::Field {
                tracepoint: self.name.clone(),
                field: field.to_owned(),
                size,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "name: tcp_retransmit_skb\nID: 2281\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:const void * skaddr;\toffset:16;\tsize:8;\tsigned:0;\n\
\tfield:__u8 saddr_v6[16];\toffset:42;\tsize:16;\tsigned:0;\n\
\tfield:int err;\toffset:76;\tsize:4;\tsigned:1;\n\nprint fmt: \"x\"\n";

    #[test]
    fn format_fields_are_found_with_sizes() {
        let f = Format::parse("tcp:tcp_retransmit_skb", SAMPLE);
        assert_eq!(f.offset_of("skaddr", 8).unwrap(), 16);
        assert_eq!(f.offset_of("saddr_v6", 16).unwrap(), 42);
        assert_eq!(f.offset_of("err", 4).unwrap(), 76);
        assert!(f.offset_of("err", 8).is_err());
        assert!(f.offset_of("nope", 4).is_err());
    }
}
