//! `[cluster]` settings, as the config file's `[cluster]` table gives them
//! (parsed and checked in `crate::config`).

/// `[cluster]`. Without it, kshim keeps its state in its data directory alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// Instances with the same id (in front of the same upstream) share state.
    pub id: String,
    /// The compacted single-partition topic holding the shared state.
    pub state_topic: String,
    /// This instance's name among the others; defaults to `<host name>-<node_id>`.
    pub instance_id: String,
    /// An instance whose registration has not been renewed for this long is no
    /// longer counted among the live instances.
    pub session_timeout_ms: u64,
    /// How often an instance renews its registration.
    pub heartbeat_interval_ms: u64,
    /// The writer's transaction timeout: a writer paused in the middle of a
    /// change holds back the others' reads at most this long.
    pub transaction_timeout_ms: u64,
    /// How long a change (UpdateFeatures, an admin PATCH) may wait for the
    /// writer's turn, its commit and its local application.
    pub write_timeout_ms: u64,
    /// How long startup waits to catch up with the state topic before serving
    /// the state kept in the data directory (not ready until caught up).
    pub startup_timeout_ms: u64,
}

pub const DEFAULT_STATE_TOPIC: &str = "__kshim_state";
