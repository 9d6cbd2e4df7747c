//! The addresses of this host, so that the proxy never connects a worker to the host itself
//! through a DNS answer or a literal the rules let through: every interface's addresses
//! (docker0 and a docker run network's gateway among them, as they are interfaces of the
//! host), read with getifaddrs when the proxy starts and again on use at most once a second,
//! since interfaces come and go. An address added since the last look is caught after
//! connecting instead ([`is_self_connection`]).

use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

/// How old the table may be before a look-up reads the interfaces again.
const FRESH: Duration = Duration::from_secs(1);

/// One address of the host and the interface that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostAddress {
    pub ip: IpAddr,
    pub interface: String,
}

type Table = Arc<Vec<HostAddress>>;

static TABLE: LazyLock<Mutex<Option<(Instant, Table)>>> = LazyLock::new(|| Mutex::new(None));

/// Reads the interfaces now (when the proxy starts), so that the first look-up finds a table.
pub fn refresh() {
    table(true);
}

/// The interface holding `ip`, if `ip` is an address of this host.
pub fn interface_of(ip: IpAddr) -> Option<String> {
    find(&table(false), ip)
}

/// [`interface_of`] after reading the interfaces again, whatever the table's age.
pub fn interface_of_now(ip: IpAddr) -> Option<String> {
    find(&table(true), ip)
}

fn find(table: &[HostAddress], ip: IpAddr) -> Option<String> {
    let ip = ip.to_canonical();
    table.iter().find(|a| a.ip == ip).map(|a| a.interface.clone())
}

/// Whether a connection the proxy made reached this host: the kernel answers a connection to
/// one of the host's own addresses from that same address.
pub fn is_self_connection(local: SocketAddr, peer: SocketAddr) -> bool {
    local.ip().to_canonical() == peer.ip().to_canonical()
}

/// The table, read again when it is older than [`FRESH`] (or `force`). When the interfaces
/// cannot be read, the last table stays (the check after connecting still holds).
fn table(force: bool) -> Table {
    let mut held = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((read, table)) = held.as_ref() {
        if !force && read.elapsed() < FRESH {
            return table.clone();
        }
    }
    match read_interfaces() {
        Ok(now) => {
            let table = Arc::new(now);
            *held = Some((Instant::now(), table.clone()));
            table
        }
        Err(_) => held.as_ref().map(|(_, t)| t.clone()).unwrap_or_default(),
    }
}

/// Every address of every interface, from getifaddrs.
fn read_interfaces() -> std::io::Result<Vec<HostAddress>> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list it allocated to `list`, or fails leaving it alone.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut at = list;
    while !at.is_null() {
        // SAFETY: `at` is an entry of the list getifaddrs made, not yet freed.
        let entry = unsafe { &*at };
        at = entry.ifa_next;
        // SAFETY: ifa_addr is null or points to a sockaddr of the family it names, sized for it.
        let Some(ip) = (unsafe { address(entry.ifa_addr) }) else { continue };
        let interface = if entry.ifa_name.is_null() {
            "?".to_string()
        } else {
            // SAFETY: ifa_name is a NUL-terminated string of the list.
            unsafe { CStr::from_ptr(entry.ifa_name) }.to_string_lossy().into_owned()
        };
        if !out.iter().any(|a: &HostAddress| a.ip == ip) {
            out.push(HostAddress { ip, interface });
        }
    }
    // SAFETY: the list came from getifaddrs and nothing refers to it any more.
    unsafe { libc::freeifaddrs(list) };
    Ok(out)
}

/// The IP address in `sa`, if it is an IPv4 or IPv6 one.
///
/// # Safety
/// `sa` is null or points to a socket address as large as its family says.
unsafe fn address(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the caller's promise; read unaligned, as the list's layout is the C library's.
    match i32::from(unsafe { (*sa).sa_family }) {
        libc::AF_INET => {
            let v4 = unsafe { std::ptr::read_unaligned(sa.cast::<libc::sockaddr_in>()) };
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr))))
        }
        libc::AF_INET6 => {
            let v6 = unsafe { std::ptr::read_unaligned(sa.cast::<libc::sockaddr_in6>()) };
            Some(IpAddr::V6(Ipv6Addr::from(v6.sin6_addr.s6_addr)).to_canonical())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_an_address_of_this_host() {
        let table = read_interfaces().expect("getifaddrs");
        let lo = table.iter().find(|a| a.ip == IpAddr::V4(Ipv4Addr::LOCALHOST)).expect("127.0.0.1 is listed");
        assert_eq!(lo.interface, "lo");
        assert_eq!(interface_of("127.0.0.1".parse().unwrap()).as_deref(), Some("lo"));
        assert_eq!(interface_of("::ffff:127.0.0.1".parse().unwrap()).as_deref(), Some("lo"), "IPv4-mapped spellings are the same address");
        assert_eq!(interface_of("1.1.1.1".parse().unwrap()), None);
    }

    #[test]
    fn a_connection_to_an_own_address_comes_from_it() {
        // The kernel's answer the check after connecting relies on, on an address that is
        // not loopback when the host has one (loopback otherwise).
        let own = read_interfaces()
            .expect("getifaddrs")
            .into_iter()
            .map(|a| a.ip)
            .find(|ip| ip.is_ipv4() && !ip.is_loopback())
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let server = std::net::TcpListener::bind((own, 0)).expect("bind");
        let conn = std::net::TcpStream::connect(server.local_addr().unwrap()).expect("connect");
        assert!(is_self_connection(conn.local_addr().unwrap(), conn.peer_addr().unwrap()), "{own}");
        assert!(!is_self_connection("10.0.0.2:5000".parse().unwrap(), "1.1.1.1:443".parse().unwrap()));
        assert!(is_self_connection("[::ffff:10.0.0.2]:5000".parse().unwrap(), "10.0.0.2:443".parse().unwrap()));
    }
}
