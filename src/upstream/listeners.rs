//! One kshim listener per upstream broker, keyed by node id, so that every broker
//! address a client learns is one of kshim's.
//!
//! A listener is bound the first time a node id is seen, before the response that
//! names it goes out: the kernel queues connections on a bound socket, so a client
//! that connects at once is never refused. Bound sockets are handed to whoever
//! serves them through a channel, which keeps this module free of the handlers.
//! A broker that leaves keeps its port (so that it can return to it); the client
//! connections on that port are told to close, so that clients refresh metadata.

use super::rewrite::AddressBook;
use std::collections::BTreeMap;
use std::net::TcpListener;
use std::sync::Mutex;
use tokio::sync::{mpsc, watch};

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
        Ok(port)
    }
}

struct NodeListener {
    port: u16,
    /// Where the broker is, as the upstream last reported it.
    upstream: String,
    /// Bumped when the connections on this listener must close.
    generation: watch::Sender<u64>,
}

/// The per-broker listeners and the upstream address behind each.
pub struct Listeners {
    layout: ListenerLayout,
    nodes: Mutex<BTreeMap<i32, NodeListener>>,
    bound: mpsc::UnboundedSender<(i32, TcpListener)>,
}

impl Listeners {
    /// `bound` receives every listener this set binds, with its node id.
    pub fn new(layout: ListenerLayout, bound: mpsc::UnboundedSender<(i32, TcpListener)>) -> Self {
        Listeners {
            layout,
            nodes: Mutex::new(BTreeMap::new()),
            bound,
        }
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
            if n.upstream != upstream {
                tracing::info!(
                    node = node_id,
                    "broker {node_id} moved from {} to {upstream}",
                    n.upstream
                );
                n.upstream = upstream.to_owned();
                n.generation.send_modify(|g| *g += 1);
            }
            return Ok(n.port);
        }
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
        self.bound
            .send((node_id, socket))
            .map_err(|_| "kshim is shutting down".to_owned())?;
        tracing::info!(
            node = node_id,
            "broker {node_id} ({upstream}) is served on {}:{port}, advertised as {}:{port}",
            self.layout.bind_host,
            self.layout.advertised_host
        );
        let (generation, _) = watch::channel(0);
        nodes.insert(
            node_id,
            NodeListener {
                port,
                upstream: upstream.to_owned(),
                generation,
            },
        );
        Ok(port)
    }

    /// The broker left the cluster: close the client connections routed to it.
    /// Its listener stays, so that clients holding old metadata reach kshim and
    /// are closed again until the broker returns.
    pub fn retire(&self, node_id: i32) {
        if let Some(n) = self.lock().get(&node_id) {
            n.generation.send_modify(|g| *g += 1);
        }
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
    ) -> Result<(String, i32), String> {
        let upstream = super::cluster::host_port(upstream_host, upstream_port);
        let port = self.ensure(node_id, &upstream)?;
        Ok((self.layout.advertised_host.clone(), i32::from(port)))
    }
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
        }
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
        assert_eq!(host, "kshim.example");
        assert!(port > 0);
        let (node, _socket) = rx.try_recv().unwrap();
        assert_eq!(node, 1);
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
}
