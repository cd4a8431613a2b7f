//! The in-kernel connection filter (ports, addresses) from the command line.
use std::net::IpAddr;

/// A filter value the user gave that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FilterError {
    /// Not an IPv4 or IPv6 address.
    #[error("--host {0:?} is not an IPv4 or IPv6 address")]
    BadHost(String),
    /// Port 0 matches nothing.
    #[error("--port 0 is not a port")]
    ZeroPort,
    /// More values than the kernel map holds.
    #[error("too many {what} filters: {n} (at most {max})")]
    TooMany {
        /// ports or hosts.
        what: &'static str,
        /// Given.
        n: usize,
        /// Allowed.
        max: u32,
    },
}

/// Which connections to report: any port in `ports` (local or remote) AND any address in
/// `hosts` (local or remote); an empty list does not restrict.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TcpFilter {
    /// Ports, host order.
    pub ports: Vec<u16>,
    /// Addresses.
    pub hosts: Vec<IpAddr>,
}

impl TcpFilter {
    /// Validates CLI values.
    pub fn parse(ports: &[u16], hosts: &[String]) -> Result<Self, FilterError> {
        if ports.contains(&0) {
            return Err(FilterError::ZeroPort);
        }
        let max = probe_common::FILTER_ENTRIES;
        for (what, n) in [("port", ports.len()), ("host", hosts.len())] {
            if n > max as usize {
                return Err(FilterError::TooMany { what, n, max });
            }
        }
        let hosts = hosts
            .iter()
            .map(|h| {
                let t = h.trim().trim_start_matches('[').trim_end_matches(']');
                t.parse::<IpAddr>()
                    .map_err(|_| FilterError::BadHost(h.clone()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            ports: ports.to_vec(),
            hosts,
        })
    }

    /// Map keys of the addresses: IPv4 as `::ffff:a.b.c.d`, as the programs compare them.
    pub fn host_keys(&self) -> Vec<[u8; 16]> {
        self.hosts
            .iter()
            .map(|h| match h {
                IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
                IpAddr::V6(v6) => v6.octets(),
            })
            .collect()
    }

    /// True when `src`/`dst` pass (the same rule as in the kernel).
    pub fn matches(&self, src: std::net::SocketAddr, dst: std::net::SocketAddr) -> bool {
        let port_ok = self.ports.is_empty()
            || self.ports.contains(&src.port())
            || self.ports.contains(&dst.port());
        let host_ok = self.hosts.is_empty()
            || self.hosts.contains(&src.ip())
            || self.hosts.contains(&dst.ip());
        port_ok && host_ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let f = TcpFilter::parse(&[5201], &["10.0.0.2".into(), "[fd00::2]".into()]).unwrap();
        assert_eq!(f.host_keys()[0][10..], [0xff, 0xff, 10, 0, 0, 2]);
        assert!(f.matches(
            "10.0.0.1:1".parse().unwrap(),
            "10.0.0.2:5201".parse().unwrap()
        ));
        assert!(!f.matches(
            "10.0.0.1:1".parse().unwrap(),
            "10.0.0.3:5201".parse().unwrap()
        ));
        assert_eq!(
            TcpFilter::parse(&[], &["example.com".into()]),
            Err(FilterError::BadHost("example.com".into()))
        );
        assert_eq!(TcpFilter::parse(&[0], &[]), Err(FilterError::ZeroPort));
    }
}
