//! IP networks, as `auth.trusted_proxies` and `auth.exempt_addresses`
//! write them.

use std::net::IpAddr;

/// An IP network: `10.0.0.0/8`, `::1`, `127.0.0.1` (a single address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpNet {
    address: IpAddr,
    prefix: u8,
}

impl IpNet {
    pub fn parse(text: &str) -> Result<IpNet, String> {
        let invalid = || format!("{text:?} is not an IP address or network, e.g. 10.0.0.0/8");
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let address: IpAddr = address.trim().parse().map_err(|_| invalid())?;
        let bits = if address.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(prefix) => prefix
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= bits)
                .ok_or_else(invalid)?,
            None => bits,
        };
        Ok(IpNet { address, prefix })
    }

    pub fn contains(&self, address: IpAddr) -> bool {
        let to_bits = |address: IpAddr| match address {
            IpAddr::V4(v4) => (u128::from(u32::from(v4)) << 96, true),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => (u128::from(u32::from(v4)) << 96, true),
                None => (u128::from(v6), false),
            },
        };
        let (network, network_is_v4) = to_bits(self.address);
        let (candidate, candidate_is_v4) = to_bits(address);
        if network_is_v4 != candidate_is_v4 {
            return false;
        }
        // A v4 network sits in the top 32 bits, so its prefix counts from there.
        let prefix = u32::from(self.prefix);
        let mask = if prefix == 0 {
            0
        } else {
            u128::MAX << (128 - prefix)
        };
        network & mask == candidate & mask
    }
}

/// Each of `texts` as a network; an error names `field[index]`.
pub(super) fn parse_all(texts: &[String], field: &str) -> Result<Vec<IpNet>, (String, String)> {
    texts
        .iter()
        .enumerate()
        .map(|(index, text)| IpNet::parse(text).map_err(|m| (format!("{field}[{index}]"), m)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_contain_their_addresses() {
        let net = IpNet::parse("10.0.0.0/8").unwrap();
        assert!(net.contains("10.1.2.3".parse().unwrap()));
        assert!(!net.contains("11.0.0.1".parse().unwrap()));
        assert!(
            net.contains("::ffff:10.0.0.1".parse().unwrap()),
            "v4-mapped v6 peer"
        );
        let single = IpNet::parse("::1").unwrap();
        assert!(single.contains("::1".parse().unwrap()));
        assert!(!single.contains("::2".parse().unwrap()));
        assert!(
            IpNet::parse("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        assert!(IpNet::parse("nonsense").is_err());
    }
}
