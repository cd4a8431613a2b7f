//! TLS key log (NSS `SSLKEYLOGFILE` format, also the text of a pcapng Decryption Secrets Block).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// TLS 1.3 secrets of one connection, keyed in the log by its client random.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsSecrets {
    /// CLIENT_HANDSHAKE_TRAFFIC_SECRET.
    pub client_handshake: Option<Vec<u8>>,
    /// SERVER_HANDSHAKE_TRAFFIC_SECRET.
    pub server_handshake: Option<Vec<u8>>,
    /// CLIENT_TRAFFIC_SECRET_0.
    pub client_traffic_0: Option<Vec<u8>>,
    /// SERVER_TRAFFIC_SECRET_0.
    pub server_traffic_0: Option<Vec<u8>>,
    /// CLIENT_EARLY_TRAFFIC_SECRET (0-RTT).
    pub client_early: Option<Vec<u8>>,
}

/// What is wrong with one keylog line.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LineProblem {
    /// Fewer than three space-separated fields.
    #[error("expected `LABEL CLIENT_RANDOM SECRET`, found {0} field(s)")]
    FieldCount(usize),
    /// A field that is not hexadecimal.
    #[error("{0} is not valid hex")]
    BadHex(&'static str),
    /// A client random that is not 32 bytes.
    #[error("client random is {0} bytes, expected 32")]
    RandomLength(usize),
    /// A TLS 1.3 secret that is neither 32 nor 48 bytes.
    #[error("secret is {0} bytes, expected 32 (SHA-256) or 48 (SHA-384)")]
    SecretLength(usize),
    /// The line is not UTF-8.
    #[error("line is not UTF-8")]
    NotUtf8,
}

/// Errors reading a keylog.
#[derive(Debug, Error)]
pub enum KeylogError {
    /// A line that could not be used, with its 1-based number.
    #[error("{source_name} line {line}: {problem}")]
    Line {
        /// File path or other source name.
        source_name: String,
        /// 1-based line number.
        line: usize,
        /// Why.
        problem: LineProblem,
    },
    /// The file could not be read.
    #[error("cannot read keylog {path}: {cause}")]
    Io {
        /// Path.
        path: PathBuf,
        /// OS error.
        cause: std::io::Error,
    },
}

/// Parsed TLS key log: secrets by client random.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keylog {
    entries: HashMap<[u8; 32], TlsSecrets>,
    /// Lines with labels this decoder does not use (TLS 1.2 CLIENT_RANDOM, EXPORTER_SECRET, …).
    pub ignored_lines: usize,
}

fn hex(s: &str, field: &'static str) -> Result<Vec<u8>, LineProblem> {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(2) {
        return Err(LineProblem::BadHex(field));
    }
    let nib = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    b.chunks_exact(2)
        .map(|p| Some(nib(p[0])? << 4 | nib(p[1])?))
        .collect::<Option<Vec<u8>>>()
        .ok_or(LineProblem::BadHex(field))
}

impl Keylog {
    /// Parses keylog text (a file's or a Decryption Secrets Block's bytes).
    pub fn parse(text: &[u8]) -> Result<Self, KeylogError> {
        Self::parse_named(text, "keylog")
    }

    /// Parses keylog text; errors name `source_name` and the line.
    pub fn parse_named(text: &[u8], source_name: &str) -> Result<Self, KeylogError> {
        let mut log = Self::default();
        log.extend(text, source_name)?;
        Ok(log)
    }

    /// Reads and parses a keylog file.
    pub fn from_file(path: &Path) -> Result<Self, KeylogError> {
        let text = std::fs::read(path).map_err(|cause| KeylogError::Io {
            path: path.to_path_buf(),
            cause,
        })?;
        Self::parse_named(&text, &path.display().to_string())
    }

    /// Adds the secrets of more keylog text (e.g. several Decryption Secrets Blocks).
    pub fn extend(&mut self, text: &[u8], source_name: &str) -> Result<(), KeylogError> {
        for (i, raw) in text.split(|&b| b == b'\n').enumerate() {
            let err = |problem| KeylogError::Line {
                source_name: source_name.to_owned(),
                line: i + 1,
                problem,
            };
            let line = std::str::from_utf8(raw).map_err(|_| err(LineProblem::NotUtf8))?;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split_ascii_whitespace().collect();
            let [label, random, secret] = fields[..] else {
                return Err(err(LineProblem::FieldCount(fields.len())));
            };
            let slot = match label {
                "CLIENT_HANDSHAKE_TRAFFIC_SECRET" => 0,
                "SERVER_HANDSHAKE_TRAFFIC_SECRET" => 1,
                "CLIENT_TRAFFIC_SECRET_0" => 2,
                "SERVER_TRAFFIC_SECRET_0" => 3,
                "CLIENT_EARLY_TRAFFIC_SECRET" => 4,
                _ => {
                    self.ignored_lines += 1;
                    continue;
                }
            };
            let random = hex(random, "client random").map_err(err)?;
            let random: [u8; 32] = random
                .as_slice()
                .try_into()
                .map_err(|_| err(LineProblem::RandomLength(random.len())))?;
            let secret = hex(secret, "secret").map_err(err)?;
            if secret.len() != 32 && secret.len() != 48 {
                return Err(err(LineProblem::SecretLength(secret.len())));
            }
            let e = self.entries.entry(random).or_default();
            let field = match slot {
                0 => &mut e.client_handshake,
                1 => &mut e.server_handshake,
                2 => &mut e.client_traffic_0,
                3 => &mut e.server_traffic_0,
                _ => &mut e.client_early,
            };
            *field = Some(secret);
        }
        Ok(())
    }

    /// Every entry: client random and secrets.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8; 32], &TlsSecrets)> {
        self.entries.iter()
    }

    /// Secrets for a client random.
    pub fn get(&self, client_random: &[u8; 32]) -> Option<&TlsSecrets> {
        self.entries.get(client_random)
    }

    /// Number of connections (client randoms) with TLS 1.3 secrets.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no TLS 1.3 secrets were found.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: &str = "0101010101010101010101010101010101010101010101010101010101010101";
    const S: &str = "0202020202020202020202020202020202020202020202020202020202020202";

    #[test]
    fn parses_and_names_bad_lines() {
        let text =
            format!("# comment\n\nCLIENT_RANDOM {R} {S}{S}\nCLIENT_TRAFFIC_SECRET_0 {R} {S}\r\n");
        let log = Keylog::parse(text.as_bytes()).unwrap();
        assert_eq!(log.len(), 1);
        assert_eq!(log.ignored_lines, 1);
        assert_eq!(
            log.get(&[1; 32]).unwrap().client_traffic_0.as_deref(),
            Some(&[2u8; 32][..])
        );

        let bad = format!("SERVER_TRAFFIC_SECRET_0 {R} {S}\nSERVER_TRAFFIC_SECRET_0 {R} zz\n");
        let e = Keylog::parse_named(bad.as_bytes(), "k.log").unwrap_err();
        assert_eq!(e.to_string(), "k.log line 2: secret is not valid hex");
        let e = Keylog::parse(b"SERVER_TRAFFIC_SECRET_0 0101 0202").unwrap_err();
        assert!(matches!(
            e,
            KeylogError::Line {
                line: 1,
                problem: LineProblem::RandomLength(2),
                ..
            }
        ));
        let e = Keylog::parse(format!("SERVER_TRAFFIC_SECRET_0 {R}").as_bytes()).unwrap_err();
        assert!(matches!(
            e,
            KeylogError::Line {
                problem: LineProblem::FieldCount(2),
                ..
            }
        ));
        let e = Keylog::parse(format!("SERVER_TRAFFIC_SECRET_0 {R} 0202").as_bytes()).unwrap_err();
        assert!(matches!(
            e,
            KeylogError::Line {
                problem: LineProblem::SecretLength(2),
                ..
            }
        ));
    }
}
