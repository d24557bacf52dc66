//! One kshim listener per upstream broker, keyed by node id, so that every broker
//! address a client learns is one of kshim's.
//!
//! A listener is bound the first time a node id is seen, before the response that
//! names it goes out: the kernel queues connections on a bound socket, so a client
//! that connects at once is never refused. Bound sockets are handed to whoever
//! serves them through a channel, which keeps this module free of the handlers.
//! A broker that leaves keeps its port for a grace period (so that it can return
//! to it); the client connections on that port are told to close, so that
//! clients refresh metadata. Past the grace period its listener closes.
//!
//! What the upstream says is bounded: at most `max_brokers` node ids get a
//! listener, and no broker's port may be one of kshim's own or another node's.
//!
//! With `upstream.listeners.sni_host` no port is bound per broker: every broker
//! is served on the bootstrap listener, under a TLS server name of its own
//! (`sni::ServerNames`), and a node id is known here for routing and addresses
//! only.

use super::sni::ServerNames;
use crate::protocol::rewrite::AddressBook;
use arc_swap::ArcSwap;
use std::collections::{BTreeMap, HashMap};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// What a TLS server name asks for (`upstream.listeners.sni_host`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRoute {
    Found(Route),
    /// A broker's name by the pattern, for a node this instance has not seen:
    /// a broker that just joined, or one kshim has not reached since it started.
    NotYetSeen(i32),
    /// No name, or one that is neither the bootstrap's nor a broker's.
    Unrecognized,
}

/// Which upstream broker a kshim listener stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The bootstrap listener: any live broker will do.
    Bootstrap,
    /// The listener of one broker node.
    Node(i32),
}

/// Where per-broker listeners go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerLayout {
    /// The address listeners bind to.
    pub bind_host: String,
    /// The host clients are told.
    pub advertised_host: String,
    /// Node N listens on `port_base + N`; 0 gives each node an ephemeral port.
    pub port_base: u16,
    /// Explicit node id -> port, ahead of `port_base`.
    pub ports: BTreeMap<i32, u16>,
    /// The bootstrap listener's port, which no broker may take.
    pub bootstrap_port: u16,
    /// Other ports of kshim's own (the admin API's), which no broker may take.
    pub reserved: Vec<(&'static str, u16)>,
    /// Node ids that get a listener, at most.
    pub max_brokers: usize,
    /// How long the listener of a broker that left stays open.
    pub grace: Duration,
    /// Every broker on the bootstrap listener, by TLS server name, instead of
    /// a port each.
    pub server_names: Option<ServerNames>,
}

impl ListenerLayout {
    /// The port for `node_id`, 0 for an ephemeral one.
    pub fn port_for(&self, node_id: i32) -> Result<u16, String> {
        let port = if let Some(&port) = self.ports.get(&node_id) {
            port
        } else if self.port_base == 0 {
            return Ok(0);
        } else {
            u16::try_from(i64::from(self.port_base) + i64::from(node_id))
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| {
                    format!(
                        "node {node_id} has no port: port_base {} + {node_id} is outside 1-65535; \
                         give it one in upstream.listeners.ports",
                        self.port_base
                    )
                })?
        };
        if port != 0 && port == self.bootstrap_port {
            return Err(format!(
                "node {node_id} would be served on {port}, the bootstrap listener's port; \
                 give it another in upstream.listeners.ports or move port_base"
            ));
        }
        if let Some((what, _)) = self.reserved.iter().find(|(_, p)| port != 0 && *p == port) {
            return Err(format!(
                "node {node_id} would be served on {port}, the port of {what}; \
                 give it another in upstream.listeners.ports or move port_base"
            ));
        }
        if let Some((other, _)) = self
            .ports
            .iter()
            .find(|(&other, &p)| other != node_id && port != 0 && p == port)
        {
            return Err(format!(
                "node {node_id} would be served on {port}, which upstream.listeners.ports gives node {other}"
            ));
        }
        Ok(port)
    }
}

struct NodeListener {
    port: u16,
    /// Where the broker is, as the upstream last reported it.
    upstream: String,
    /// Bumped when the connections on this listener must close.
    generation: watch::Sender<u64>,
    /// Since when the broker has been missing from the upstream's Metadata.
    gone_since: Option<Instant>,
    /// Turns true when the listener itself must close.
    close: watch::Sender<bool>,
}

/// A listener bound for a broker, for whoever serves it.
pub struct BoundListener {
    pub node_id: i32,
    pub socket: TcpListener,
    /// Turns true when the listener must stop accepting.
    pub closed: watch::Receiver<bool>,
}

/// What a rewrite needs of a broker kshim serves now: where the upstream has it,
/// and what clients are told instead.
struct Served {
    /// As `NodeListener::upstream`.
    upstream: String,
    host: Arc<str>,
    port: u16,
}

/// The per-broker listeners and the upstream address behind each.
pub struct Listeners {
    layout: ListenerLayout,
    nodes: Mutex<BTreeMap<i32, NodeListener>>,
    /// The brokers served now (not gone), republished under the lock whenever
    /// `nodes` changes, so that rewriting a response that names known brokers at
    /// their known addresses takes no lock and allocates nothing.
    served: ArcSwap<HashMap<i32, Served>>,
    /// The host clients are told, without `sni_host`.
    advertised: Arc<str>,
    bound: mpsc::UnboundedSender<BoundListener>,
}

impl Listeners {
    /// `bound` receives every listener this set binds.
    pub fn new(layout: ListenerLayout, bound: mpsc::UnboundedSender<BoundListener>) -> Self {
        Listeners {
            advertised: Arc::from(layout.advertised_host.as_str()),
            layout,
            nodes: Mutex::new(BTreeMap::new()),
            served: ArcSwap::default(),
            bound,
        }
    }

    /// Republishes the brokers served now, from `nodes` (held locked).
    fn publish(&self, nodes: &BTreeMap<i32, NodeListener>) {
        let served = nodes
            .iter()
            .filter(|(_, n)| n.gone_since.is_none())
            .map(|(&id, n)| {
                let host = match &self.layout.server_names {
                    Some(names) => Arc::from(names.host_of(id)),
                    None => Arc::clone(&self.advertised),
                };
                let upstream = n.upstream.clone();
                (
                    id,
                    Served {
                        upstream,
                        host,
                        port: n.port,
                    },
                )
            })
            .collect();
        self.served.store(Arc::new(served));
    }

    /// The upstream address of `node_id`, if known.
    pub fn upstream_of(&self, node_id: i32) -> Option<String> {
        self.lock().get(&node_id).map(|n| n.upstream.clone())
    }

    /// Resolves when the connections routed to `node_id` must close.
    pub fn watch(&self, node_id: i32) -> Option<watch::Receiver<u64>> {
        self.lock().get(&node_id).map(|n| n.generation.subscribe())
    }

    /// Makes sure `node_id` has a listener and records where the broker is.
    /// A broker that moved has its client connections closed.
    pub fn ensure(&self, node_id: i32, upstream: &str) -> Result<u16, String> {
        let mut nodes = self.lock();
        if let Some(n) = nodes.get_mut(&node_id) {
            let port = n.port;
            let returned = n.gone_since.take().is_some();
            let moved = n.upstream != upstream;
            if moved {
                tracing::info!(
                    node = node_id,
                    "broker {node_id} moved from {} to {upstream}",
                    n.upstream
                );
                n.upstream = upstream.to_owned();
                n.generation.send_modify(|g| *g += 1);
            }
            if returned || moved {
                self.publish(&nodes);
            }
            return Ok(port);
        }
        if nodes.len() >= self.layout.max_brokers {
            return Err(format!(
                "broker {node_id} is not served: kshim already has listeners for {} brokers \
                 (upstream.max_brokers)",
                self.layout.max_brokers
            ));
        }
        let (port, close) = match &self.layout.server_names {
            Some(names) => {
                tracing::info!(
                    node = node_id,
                    "broker {node_id} ({upstream}) is served on the bootstrap listener as {}:{}",
                    names.host_of(node_id),
                    names.port
                );
                // No listener of its own to close.
                (names.port, watch::channel(false).0)
            }
            None => self.bind(node_id, upstream)?,
        };
        let (generation, _) = watch::channel(0);
        nodes.insert(
            node_id,
            NodeListener {
                port,
                upstream: upstream.to_owned(),
                generation,
                gone_since: None,
                close,
            },
        );
        self.publish(&nodes);
        Ok(port)
    }

    /// Binds the listener of `node_id` and hands it to whoever serves it; its
    /// port, and the sender that closes it.
    fn bind(&self, node_id: i32, upstream: &str) -> Result<(u16, watch::Sender<bool>), String> {
        let wanted = self.layout.port_for(node_id)?;
        let socket = TcpListener::bind((self.layout.bind_host.as_str(), wanted))
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| {
                format!(
                    "cannot listen for broker {node_id} on {}:{wanted}: {e}",
                    self.layout.bind_host
                )
            })?;
        let port = socket
            .local_addr()
            .map_err(|e| format!("listener for broker {node_id}: {e}"))?
            .port();
        let (close, closed) = watch::channel(false);
        self.bound
            .send(BoundListener {
                node_id,
                socket,
                closed,
            })
            .map_err(|_| "kshim is shutting down".to_owned())?;
        tracing::info!(
            node = node_id,
            "broker {node_id} ({upstream}) is served on {}:{port}, advertised as {}:{port}",
            self.layout.bind_host,
            self.layout.advertised_host
        );
        Ok((port, close))
    }

    /// The broker left the cluster: close the client connections routed to it.
    /// Its listener stays for the grace period, so that clients holding old
    /// metadata reach kshim and are closed again until the broker returns.
    pub fn retire(&self, node_id: i32) {
        let mut nodes = self.lock();
        if let Some(n) = nodes.get_mut(&node_id) {
            n.generation.send_modify(|g| *g += 1);
            n.gone_since.get_or_insert_with(Instant::now);
            self.publish(&nodes);
        }
    }

    /// Closes the listeners of brokers gone for longer than the grace period;
    /// returns their node ids.
    pub fn sweep(&self) -> Vec<i32> {
        let grace = self.layout.grace;
        let mut nodes = self.lock();
        let expired: Vec<i32> = nodes
            .iter()
            .filter(|(_, n)| n.gone_since.is_some_and(|t| t.elapsed() >= grace))
            .map(|(&id, _)| id)
            .collect();
        for id in &expired {
            if let Some(n) = nodes.remove(id) {
                let _ = n.close.send(true);
            }
        }
        if !expired.is_empty() {
            self.publish(&nodes);
        }
        expired
    }

    /// Closes every listener (at shutdown).
    pub fn close_all(&self) {
        for n in self.lock().values() {
            let _ = n.close.send(true);
        }
    }

    /// With `sni_host`, what a TLS server name asks for: the bootstrap, a broker
    /// kshim serves now (or within its grace period), or a broker's name for a
    /// node it has not seen (yet). `Unrecognized` without `sni_host`, or for a
    /// name that is neither.
    pub fn route_by_name(&self, server_name: Option<&str>) -> NameRoute {
        let Some(names) = self.layout.server_names.as_ref() else {
            return NameRoute::Unrecognized;
        };
        match names.route(server_name) {
            None => NameRoute::Unrecognized,
            Some(Route::Node(id)) if !self.lock().contains_key(&id) => NameRoute::NotYetSeen(id),
            Some(route) => NameRoute::Found(route),
        }
    }

    /// Whether brokers are told apart by TLS server name (`sni_host`).
    pub fn by_server_name(&self) -> bool {
        self.layout.server_names.is_some()
    }

    /// Node ids with a listener now.
    pub fn served(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<i32, NodeListener>> {
        // The map stays consistent even if a holder panicked: every update is a
        // single insert or field write.
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl AddressBook for Listeners {
    fn client_address(
        &self,
        node_id: i32,
        upstream_host: &str,
        upstream_port: i32,
    ) -> Result<(Arc<str>, i32), String> {
        if let Some(known) = self.served.load().get(&node_id) {
            if is_host_port(&known.upstream, upstream_host, upstream_port) {
                return Ok((Arc::clone(&known.host), i32::from(known.port)));
            }
        }
        let upstream = super::cluster::host_port(upstream_host, upstream_port);
        let port = self.ensure(node_id, &upstream)?;
        let host = match &self.layout.server_names {
            Some(names) => Arc::from(names.host_of(node_id)),
            None => Arc::clone(&self.advertised),
        };
        Ok((host, i32::from(port)))
    }
}

/// Whether `address` is what `cluster::host_port(host, port)` makes of them, without
/// making it.
fn is_host_port(address: &str, host: &str, port: i32) -> bool {
    use std::io::Write;
    let rest = if host.contains(':') && !host.starts_with('[') {
        address
            .strip_prefix('[')
            .and_then(|a| a.strip_prefix(host))
            .and_then(|a| a.strip_prefix("]:"))
    } else {
        address.strip_prefix(host).and_then(|a| a.strip_prefix(':'))
    };
    let mut digits = [0u8; 11];
    let written = {
        let mut cursor = &mut digits[..];
        // "-2147483648" is the longest i32: it fits.
        let _ = write!(cursor, "{port}");
        11 - cursor.len()
    };
    rest.is_some_and(|r| r.as_bytes() == &digits[..written])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(base: u16) -> ListenerLayout {
        ListenerLayout {
            bind_host: "127.0.0.1".into(),
            advertised_host: "kshim.example".into(),
            port_base: base,
            ports: [(7, 0), (8, 9092)].into(),
            bootstrap_port: 9092,
            reserved: vec![("admin.listen", 9880)],
            max_brokers: 3,
            grace: Duration::from_millis(50),
            server_names: None,
        }
    }

    #[test]
    fn an_address_is_compared_as_host_port_writes_it() {
        for (host, port) in [
            ("b1.example", 9092),
            ("::1", 19092),
            ("[::1]", 1),
            ("h", -1),
        ] {
            let address = crate::upstream::cluster::host_port(host, port);
            assert!(is_host_port(&address, host, port), "{address}");
            assert!(!is_host_port(&address, host, port + 1), "{address}");
            assert!(!is_host_port(&address, "other", port), "{address}");
        }
        assert!(!is_host_port("b1.example:09092", "b1.example", 9092));
        assert!(!is_host_port("b1.example", "b1.example", 9092));
    }

    #[test]
    fn ports_follow_the_node_id_unless_overridden() {
        let l = layout(20000);
        assert_eq!(l.port_for(3), Ok(20003));
        assert_eq!(l.port_for(7), Ok(0));
        assert!(l
            .port_for(60000)
            .unwrap_err()
            .contains("upstream.listeners.ports"));
        assert_eq!(layout(0).port_for(5), Ok(0));
    }

    #[test]
    fn a_node_is_bound_once_and_a_move_closes_its_connections() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let listeners = Listeners::new(layout(0), tx);
        let (host, port) = listeners.client_address(1, "10.0.0.1", 9092).unwrap();
        assert_eq!(&*host, "kshim.example");
        assert!(port > 0);
        let bound = rx.try_recv().unwrap();
        assert_eq!(bound.node_id, 1);
        let watch = listeners.watch(1).unwrap();
        assert_eq!(
            listeners.client_address(1, "10.0.0.1", 9092).unwrap().1,
            port
        );
        assert!(rx.try_recv().is_err(), "no second listener");
        assert!(!watch.has_changed().unwrap());
        listeners.client_address(1, "10.0.0.2", 9092).unwrap();
        assert!(watch.has_changed().unwrap());
        assert_eq!(listeners.upstream_of(1).as_deref(), Some("10.0.0.2:9092"));
        assert_eq!(super::super::cluster::host_port("::1", 9092), "[::1]:9092");
    }

    #[test]
    fn kshims_own_ports_and_other_nodes_ports_are_never_taken() {
        let mut l = layout(9000);
        assert!(l.port_for(880).unwrap_err().contains("admin.listen"));
        l.ports.insert(9, 9005);
        assert!(l.port_for(5).unwrap_err().contains("gives node 9"));
        assert_eq!(l.port_for(9), Ok(9005));
    }

    #[test]
    fn at_most_max_brokers_are_served_and_gone_ones_close_after_the_grace() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let listeners = Listeners::new(layout(0), tx);
        for id in 1..=3 {
            listeners.ensure(id, "10.0.0.1:9092").unwrap();
        }
        let err = listeners.ensure(4, "10.0.0.1:9092").unwrap_err();
        assert!(err.contains("upstream.max_brokers"), "{err}");
        let mut bound: Vec<BoundListener> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert_eq!(bound.len(), 3);
        listeners.retire(2);
        assert!(
            listeners.sweep().is_empty(),
            "still within the grace period"
        );
        // A broker that returns in time keeps its listener.
        listeners.retire(3);
        listeners.ensure(3, "10.0.0.1:9092").unwrap();
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(listeners.sweep(), vec![2]);
        assert!(*bound[1].closed.borrow_and_update());
        assert!(!*bound[2].closed.borrow_and_update());
        assert_eq!(listeners.served(), 2);
        listeners.ensure(4, "10.0.0.1:9092").unwrap();
        listeners.close_all();
        assert!(*bound[0].closed.borrow_and_update());
    }

    #[test]
    fn by_server_name_no_port_is_bound_and_only_known_brokers_are_routed() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut l = layout(20000);
        l.server_names =
            Some(ServerNames::new("b-{node_id}.kafka.test", "kafka.test", 9093).unwrap());
        let listeners = Listeners::new(l, tx);
        assert_eq!(
            listeners.route_by_name(Some("b-1.kafka.test")),
            NameRoute::NotYetSeen(1),
            "not known yet"
        );
        assert_eq!(
            listeners.client_address(1, "10.0.0.1", 9092).unwrap(),
            ("b-1.kafka.test".into(), 9093)
        );
        assert!(rx.try_recv().is_err(), "nothing bound");
        assert_eq!(
            listeners.route_by_name(Some("B-1.kafka.test.")),
            NameRoute::Found(Route::Node(1))
        );
        assert_eq!(
            listeners.route_by_name(Some("kafka.test")),
            NameRoute::Found(Route::Bootstrap)
        );
        assert_eq!(
            listeners.route_by_name(Some("b-2.kafka.test")),
            NameRoute::NotYetSeen(2)
        );
        assert_eq!(
            listeners.route_by_name(Some("b-2.kafka.org")),
            NameRoute::Unrecognized
        );
        assert_eq!(listeners.route_by_name(None), NameRoute::Unrecognized);
    }
}
