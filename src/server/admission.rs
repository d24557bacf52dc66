//! Who may open a connection, before a byte of it is read: the cap on all
//! connections, the cap per client address (Kafka's `max.connections.per.ip` and
//! its overrides), and the file descriptors they may use; and who may wait for
//! a TLS handshake: a bounded queue, with a share per client address.
//!
//! A TLS handshake costs the server a signature (about a millisecond of CPU);
//! handshakes queued beyond what the handshake threads can finish within their
//! deadline only time out after their signature was spent, and sockets that
//! never send a ClientHello hold their place until the deadline. So past the
//! queue's bound a new TLS connection is refused at once, and no address may
//! hold more than its share of the queue.
//!
//! A connection over a cap is accepted and closed at once, so the client sees a
//! refusal instead of waiting in the kernel's backlog. When the process runs out
//! of descriptors anyway, `accept` fails and the waiting connection cannot even
//! be taken off the backlog; one spare descriptor, kept open for that moment,
//! is closed to take it and close it, then opened again.

use crate::metrics::ConnectionRefusal;
use std::collections::HashMap;
use std::fs::File;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The caps every listener of one kshim shares.
pub struct Admission {
    permits: Arc<Semaphore>,
    max_per_ip: usize,
    overrides: HashMap<IpAddr, usize>,
    /// Open connections by client address.
    per_ip: Mutex<AddressCounts>,
    spare: Mutex<Option<File>>,
    handshakes: HandshakeQueue,
}

/// The bound on TLS handshakes waiting or running at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandshakeLimits {
    pub max_pending: usize,
    pub max_pending_per_ip: usize,
}

impl HandshakeLimits {
    /// 128 per CPU (the handshake threads finish about a thousand a second per
    /// CPU, so a full queue is done well within its deadline), at least 64; a
    /// quarter of that per address.
    pub fn for_this_machine() -> HandshakeLimits {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let max_pending = (128 * cpus).max(64);
        HandshakeLimits {
            max_pending,
            max_pending_per_ip: max_pending / 4,
        }
    }
}

struct HandshakeQueue {
    limits: HandshakeLimits,
    /// Pending handshakes by client address.
    pending: Mutex<AddressCounts>,
}

/// Places held, in all and by client address; an address that holds none is
/// removed, so the map holds only addresses with something open.
#[derive(Default)]
struct AddressCounts {
    total: usize,
    by_ip: HashMap<IpAddr, usize>,
}

impl AddressCounts {
    fn of(&self, ip: IpAddr) -> usize {
        self.by_ip.get(&ip).copied().unwrap_or(0)
    }

    fn take(&mut self, ip: IpAddr) {
        self.total += 1;
        *self.by_ip.entry(ip).or_default() += 1;
    }

    fn give_back(&mut self, ip: IpAddr) {
        if let Some(n) = self.by_ip.get_mut(&ip) {
            self.total -= 1;
            *n -= 1;
            if *n == 0 {
                self.by_ip.remove(&ip);
            }
        }
    }
}

/// A place in the handshake queue; dropping it gives the place back.
pub struct PendingHandshake {
    ip: IpAddr,
    admission: Arc<Admission>,
}

impl Drop for PendingHandshake {
    fn drop(&mut self) {
        self.admission.handshakes_lock().give_back(self.ip);
    }
}

/// A connection that was let in; dropping it gives its places back.
pub struct Admitted {
    _permit: OwnedSemaphorePermit,
    ip: IpAddr,
    admission: Arc<Admission>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.admission.lock().give_back(self.ip);
    }
}

impl Admission {
    pub fn new(
        max_connections: usize,
        max_per_ip: usize,
        overrides: HashMap<IpAddr, usize>,
        handshakes: HandshakeLimits,
    ) -> Arc<Admission> {
        Arc::new(Admission {
            permits: Arc::new(Semaphore::new(max_connections)),
            max_per_ip,
            overrides,
            per_ip: Mutex::new(AddressCounts::default()),
            spare: Mutex::new(File::open("/dev/null").ok()),
            handshakes: HandshakeQueue {
                limits: handshakes,
                pending: Mutex::new(AddressCounts::default()),
            },
        })
    }

    /// A place in the TLS handshake queue for a connection from `ip`, or
    /// `HandshakeQueue` when the queue, or this address's share of it, is full.
    pub fn begin_handshake(
        self: &Arc<Self>,
        ip: IpAddr,
    ) -> Result<PendingHandshake, ConnectionRefusal> {
        let ip = canonical(ip);
        let limits = self.handshakes.limits;
        let mut pending = self.handshakes_lock();
        if pending.total >= limits.max_pending || pending.of(ip) >= limits.max_pending_per_ip {
            return Err(ConnectionRefusal::HandshakeQueue);
        }
        pending.take(ip);
        Ok(PendingHandshake {
            ip,
            admission: Arc::clone(self),
        })
    }

    /// TLS handshakes waiting or running now.
    pub fn pending_handshakes(&self) -> usize {
        self.handshakes_lock().total
    }

    fn handshakes_lock(&self) -> std::sync::MutexGuard<'_, AddressCounts> {
        // Every update keeps the total and the map in step within one lock.
        self.handshakes
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The cap for connections from `ip`.
    pub fn limit_for(&self, ip: IpAddr) -> usize {
        let ip = canonical(ip);
        self.overrides.get(&ip).copied().unwrap_or(self.max_per_ip)
    }

    /// Lets a connection from `ip` in, or says which cap it hit.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Admitted, ConnectionRefusal> {
        let ip = canonical(ip);
        let limit = self.limit_for(ip);
        let mut per_ip = self.lock();
        if per_ip.of(ip) >= limit {
            return Err(ConnectionRefusal::AddressLimit);
        }
        let permit = Arc::clone(&self.permits)
            .try_acquire_owned()
            .map_err(|_| ConnectionRefusal::ConnectionLimit)?;
        per_ip.take(ip);
        Ok(Admitted {
            _permit: permit,
            ip,
            admission: Arc::clone(self),
        })
    }

    /// `accept` failed for want of descriptors: takes the waiting connection
    /// with the spare descriptor and closes it. Returns whether one was shed.
    pub async fn shed(&self, listener: &TcpListener) -> bool {
        let Some(spare) = self.spare_lock().take() else {
            return false;
        };
        drop(spare);
        let shed =
            match tokio::time::timeout(std::time::Duration::from_millis(10), listener.accept())
                .await
            {
                Ok(Ok((stream, _))) => {
                    drop(stream);
                    true
                }
                _ => false,
            };
        *self.spare_lock() = File::open("/dev/null").ok();
        shed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AddressCounts> {
        // Every update is one insert or removal, so a panicked holder leaves
        // the counts whole.
        self.per_ip.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn spare_lock(&self) -> std::sync::MutexGuard<'_, Option<File>> {
        self.spare.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An IPv4 client on a dual-stack socket arrives as `::ffff:a.b.c.d`; it is
/// counted, and matched against overrides, as `a.b.c.d`.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// Raises the soft limit on open files to the hard limit, and returns the
/// limit in force (`None` where it cannot be read).
pub fn raise_descriptor_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    let before = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit.rlim_cur = limit.rlim_max;
            tracing::info!(
                "open-file limit raised from {before} to {} (the hard limit)",
                limit.rlim_cur
            );
        }
    }
    Some(limit.rlim_cur as u64)
}

/// How many client connections fit in `descriptors`, keeping `reserve` for
/// everything else, when each connection holds `per_connection` descriptors
/// and `fixed` more are held by listeners and kshim's own connections.
pub fn connection_budget(
    descriptors: u64,
    reserve: usize,
    fixed: usize,
    per_connection: usize,
) -> usize {
    let free = descriptors.saturating_sub((reserve + fixed) as u64);
    usize::try_from(free / per_connection.max(1) as u64)
        .unwrap_or(usize::MAX)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_has_its_own_cap_and_places_come_back() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let vip: IpAddr = "10.0.0.9".parse().unwrap();
        let admission =
            Admission::new(5, 2, [(vip, 3)].into(), HandshakeLimits::for_this_machine());
        let first = admission.admit(a).unwrap();
        let _second = admission.admit(a).unwrap();
        assert_eq!(
            admission.admit(a).err(),
            Some(ConnectionRefusal::AddressLimit)
        );
        let _other = admission.admit(b).unwrap();
        drop(first);
        let _again = admission.admit(a).unwrap();
        // The mapped form of an IPv4 address is the same address.
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(
            admission.admit(mapped).err(),
            Some(ConnectionRefusal::AddressLimit)
        );
        let _v1 = admission.admit(vip).unwrap();
        let _v2 = admission.admit(vip).unwrap();
        // Five places in all: two of 10.0.0.1, one of 10.0.0.2, two of the override's.
        assert_eq!(
            admission.admit(vip).err(),
            Some(ConnectionRefusal::ConnectionLimit)
        );
        assert_eq!(admission.limit_for(vip), 3);
    }

    #[test]
    fn an_override_of_zero_refuses_the_address() {
        let banned: IpAddr = "192.0.2.7".parse().unwrap();
        let admission = Admission::new(
            10,
            10,
            [(banned, 0)].into(),
            HandshakeLimits::for_this_machine(),
        );
        assert_eq!(
            admission.admit(banned).err(),
            Some(ConnectionRefusal::AddressLimit)
        );
    }

    #[test]
    fn the_handshake_queue_is_bounded_in_all_and_per_address() {
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let c: IpAddr = "::ffff:10.0.0.3".parse().unwrap();
        let limits = HandshakeLimits {
            max_pending: 3,
            max_pending_per_ip: 2,
        };
        let admission = Admission::new(100, 100, HashMap::new(), limits);
        let a1 = admission.begin_handshake(a).unwrap();
        let _a2 = admission.begin_handshake(a).unwrap();
        assert_eq!(
            admission.begin_handshake(a).err(),
            Some(ConnectionRefusal::HandshakeQueue)
        );
        let _b1 = admission.begin_handshake(b).unwrap();
        // Three in all: another address is refused too.
        assert!(admission.begin_handshake(c).is_err());
        assert_eq!(admission.pending_handshakes(), 3);
        drop(a1);
        let _c1 = admission.begin_handshake(c).unwrap();
        assert_eq!(admission.pending_handshakes(), 3);
    }

    #[test]
    fn the_budget_keeps_the_reserve() {
        assert_eq!(connection_budget(1024, 256, 0, 2), 384);
        assert_eq!(connection_budget(1024, 256, 1000, 2), 1);
        assert_eq!(connection_budget(1 << 20, 256, 1000, 1), (1 << 20) - 1256);
        assert!(raise_descriptor_limit().is_some_and(|n| n >= 64));
    }
}
