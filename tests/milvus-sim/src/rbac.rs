//! Authentication and Milvus's privilege checks, for a cluster with users.
//!
//! Without a `token` and without users a cluster lets everyone in. With them, every call must
//! present credentials: the cluster's `token` (root: every privilege), or `user:password` of
//! one of its users, whose grants decide what each call may do. Privileges are Milvus's
//! (`common.proto` `ObjectPrivilege`, granted by their API name: `CreateCollection`, `Import`),
//! on Milvus's objects: a `Global` privilege is granted on object name `*`, a `Collection`
//! one on a collection or `*`, either in a database or in `*`. What each gRPC request needs is
//! its `privilege_ext_obj` in `milvus.proto`; the REST import routes need `Import` on the
//! collection (for describe, get_progress, commit and abort: the job's collection, in the
//! database the `DB-Name` header names, as Milvus 3.0's `checkImportPrivilege` does).

use serde::Deserialize;

use crate::catalog::db_or_default;

/// Who made a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The cluster's token, or anyone when authentication is off.
    Root,
    User(String),
}

/// What Milvus grants on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum ObjectType {
    Global,
    Collection,
}

/// One grant of a user's role: `privilege` on `object` `name` in database `db` (`*` in
/// either matches everything, as Milvus's casbin matcher globs them).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    pub privilege: String,
    pub object: ObjectType,
    #[serde(default = "star")]
    pub db: String,
    #[serde(default = "star")]
    pub name: String,
}

fn star() -> String {
    "*".to_owned()
}

/// A user and what its roles were granted.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    pub name: String,
    pub password: String,
    #[serde(default)]
    pub grants: Vec<Grant>,
}

/// What one call needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Required {
    /// The API name, `CreateCollection`.
    pub privilege: &'static str,
    pub object: ObjectType,
    /// The collection, for a `Collection` privilege.
    pub name: String,
    /// The database the call is in (`default` when it names none); `*` for a cluster-level
    /// privilege.
    pub db: String,
}

impl Required {
    pub fn global(privilege: &'static str, db: &str) -> Self {
        Required {
            privilege,
            object: ObjectType::Global,
            name: "*".into(),
            db: db_or_default(db).into(),
        }
    }

    pub fn collection(privilege: &'static str, db: &str, collection: &str) -> Self {
        Required {
            privilege,
            object: ObjectType::Collection,
            name: collection.into(),
            db: db_or_default(db).into(),
        }
    }

    /// A cluster-level privilege, checked in database `*`.
    pub fn cluster(privilege: &'static str) -> Self {
        Required {
            privilege,
            object: ObjectType::Global,
            name: "*".into(),
            db: "*".into(),
        }
    }
}

/// The cluster's credentials.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    pub token: Option<String>,
    pub users: Vec<User>,
}

impl Access {
    /// Who presented `credentials` (a token, or `user:password`); None when they are
    /// missing or wrong on a cluster that checks.
    pub fn authenticate(&self, credentials: Option<&str>) -> Option<Caller> {
        if self.token.is_none() && self.users.is_empty() {
            return Some(Caller::Root);
        }
        let credentials = credentials?;
        if self.token.as_deref() == Some(credentials) {
            return Some(Caller::Root);
        }
        let (name, password) = credentials.split_once(':')?;
        self.users
            .iter()
            .find(|u| u.name == name && u.password == password)
            .map(|u| Caller::User(u.name.clone()))
    }

    /// Milvus's privilege interceptor: `PrivilegeX: permission deny to U in the `db`
    /// database` (a gRPC PermissionDenied; REST answers it with HTTP 403).
    pub fn authorize(&self, caller: &Caller, required: &Required) -> Result<(), Denied> {
        let Caller::User(name) = caller else {
            return Ok(());
        };
        let glob = |granted: &str, wanted: &str| granted == "*" || granted == wanted;
        let allowed = self
            .users
            .iter()
            .filter(|u| &u.name == name)
            .flat_map(|u| &u.grants)
            .any(|g| {
                g.object == required.object
                    && glob(&g.db, &required.db)
                    && glob(&g.name, &required.name)
                    && (g.privilege == "*" || g.privilege == required.privilege)
            });
        if allowed {
            Ok(())
        } else {
            Err(Denied(format!(
                "Privilege{}: permission deny to {name} in the `{}` database",
                required.privilege, required.db
            )))
        }
    }
}

/// A call the caller's grants do not allow; the Display text is Milvus's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Denied(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    fn access() -> Access {
        Access {
            token: Some("root:Milvus".into()),
            users: vec![User {
                name: "restorer".into(),
                password: "pw".into(),
                grants: vec![
                    Grant {
                        privilege: "Import".into(),
                        object: ObjectType::Collection,
                        db: "db_1".into(),
                        name: "*".into(),
                    },
                    Grant {
                        privilege: "CreateCollection".into(),
                        object: ObjectType::Global,
                        db: "db_1".into(),
                        name: "*".into(),
                    },
                ],
            }],
        }
    }

    #[test]
    fn credentials_name_the_caller() {
        let a = access();
        assert_eq!(a.authenticate(Some("root:Milvus")), Some(Caller::Root));
        assert_eq!(
            a.authenticate(Some("restorer:pw")),
            Some(Caller::User("restorer".into()))
        );
        assert_eq!(a.authenticate(Some("restorer:nope")), None);
        assert_eq!(a.authenticate(None), None);
        assert_eq!(Access::default().authenticate(None), Some(Caller::Root));
    }

    #[test]
    fn grants_match_by_object_database_name_and_privilege() {
        let a = access();
        let user = Caller::User("restorer".into());
        assert!(
            a.authorize(&user, &Required::collection("Import", "db_1", "c"))
                .is_ok()
        );
        assert!(
            a.authorize(&user, &Required::global("CreateCollection", "db_1"))
                .is_ok()
        );
        assert_eq!(
            a.authorize(&user, &Required::collection("Import", "", "c")),
            Err(Denied(
                "PrivilegeImport: permission deny to restorer in the `default` database".into()
            ))
        );
        assert!(
            a.authorize(&user, &Required::global("CreateIndex", "db_1"))
                .is_err()
        );
        assert!(
            a.authorize(&user, &Required::cluster("ImportBinlog"))
                .is_err()
        );
        assert!(
            a.authorize(&Caller::Root, &Required::cluster("ImportBinlog"))
                .is_ok()
        );
    }
}
