//! PCI bus ids in one canonical spelling, so hwloc's, NVML's and sysfs's
//! views of a device compare equal.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A PCI address, always written `dddd:bb:dd.f` in lowercase hex.
///
/// Accepts the spellings the sources use: NVML's 8-digit domain
/// (`00000000:1A:00.0`), hwloc's and sysfs's 4-digit domain, and a bare
/// `bb:dd.f` (domain 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciBusId {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid PCI bus id {input:?}: expected [domain:]bus:device.function in hex")]
pub struct PciBusIdError {
    pub input: String,
}

impl PciBusId {
    pub fn new(domain: u32, bus: u8, device: u8, function: u8) -> Self {
        PciBusId {
            domain,
            bus,
            device,
            function,
        }
    }
}

impl FromStr for PciBusId {
    type Err = PciBusIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || PciBusIdError {
            input: s.to_owned(),
        };
        let (rest, function) = s.trim().rsplit_once('.').ok_or_else(err)?;
        let mut parts: Vec<&str> = rest.split(':').collect();
        let device = parts.pop().ok_or_else(err)?;
        let bus = parts.pop().ok_or_else(err)?;
        let domain = match parts.as_slice() {
            [] => "0",
            [d] => d,
            _ => return Err(err()),
        };
        let hex32 = |t: &str, max_len: usize| {
            if t.is_empty() || t.len() > max_len {
                return Err(err());
            }
            u32::from_str_radix(t, 16).map_err(|_| err())
        };
        let domain = hex32(domain, 8)?;
        let bus = u8::try_from(hex32(bus, 2)?).map_err(|_| err())?;
        let device = u8::try_from(hex32(device, 2)?).map_err(|_| err())?;
        let function = u8::try_from(hex32(function, 1)?).map_err(|_| err())?;
        if device > 0x1f || function > 7 {
            return Err(err());
        }
        Ok(PciBusId::new(domain, bus, device, function))
    }
}

impl fmt::Display for PciBusId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl Serialize for PciBusId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PciBusId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_device_are_equal() {
        let nvml: PciBusId = "00000000:1A:00.0".parse().unwrap();
        let hwloc: PciBusId = "0000:1a:00.0".parse().unwrap();
        let short: PciBusId = "1a:00.0".parse().unwrap();
        assert_eq!(nvml, hwloc);
        assert_eq!(hwloc, short);
        assert_eq!(nvml.to_string(), "0000:1a:00.0");
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "1a:00",
            "zz:00.0",
            "0000:1a:20.0",
            "0000:1a:00.8",
            "1:2:3:4.0",
        ] {
            assert!(bad.parse::<PciBusId>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn orders_by_domain_then_bus() {
        let a: PciBusId = "0000:ff:00.0".parse().unwrap();
        let b: PciBusId = "0001:00:00.0".parse().unwrap();
        assert!(a < b);
    }
}
