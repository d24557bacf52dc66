//! Who may use the admin API, as configured now, and the component that
//! changes it while kshim runs.

use crate::config::{AdminConfig, Config};
use crate::reconfig::{KeyError, Prepared, Reconfigurable};
use crate::secret::Secret;
use arc_swap::ArcSwap;
use std::sync::Arc;

/// Who may use the API, as configured now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Access {
    pub token: Option<Secret>,
    /// `None`: any client certificate the admin listener verifies.
    pub principals: Option<Vec<String>>,
    pub read_requires_auth: bool,
}

impl Access {
    pub fn from_config(admin: &AdminConfig) -> Access {
        Access {
            token: admin.token.clone(),
            principals: admin.principals.clone(),
            read_requires_auth: admin.read_requires_auth,
        }
    }
}

pub type AccessCell = ArcSwap<Access>;

/// Who may use the admin API: `admin.token`, `admin.principals`,
/// `admin.read_requires_auth`.
pub struct AdminAccessComponent {
    pub cell: Arc<AccessCell>,
}

impl Reconfigurable for AdminAccessComponent {
    fn name(&self) -> &'static str {
        "admin access"
    }

    fn keys(&self) -> Vec<String> {
        [
            "admin.token",
            "admin.principals",
            "admin.read_requires_auth",
        ]
        .iter()
        .map(|k| (*k).to_owned())
        .collect()
    }

    fn prepare(&self, next: &Config) -> Result<Prepared, Vec<KeyError>> {
        let Some(admin) = &next.admin else {
            return Ok(Prepared::unchanged());
        };
        let access = Access::from_config(admin);
        let changed = access != **self.cell.load();
        let cell = Arc::clone(&self.cell);
        Ok(Prepared::new(changed, move || cell.store(Arc::new(access))))
    }
}
