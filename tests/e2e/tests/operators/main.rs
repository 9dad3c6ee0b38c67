//! Operators' modes against real parts: the etcd journal on a real etcd, the watched job
//! directory and the REST API against milvus-sim, and fleets of `lockstep` processes. They
//! run in the e2e crate's world (`WorldSpec::pair`), with its etcd and its `eventually`;
//! and the OCI image with the Kubernetes manifests run from it.

mod api;
mod backups;
mod bounded;
mod etcd_cluster;
mod etcd_journal;
mod exit_codes;
mod first_week;
mod fleet;
mod hostile;
mod image;
mod logs;
mod long_history;
mod milvus_backup_api;
mod owner_only;
mod secrets;
mod serve_access;
mod support;
mod trust;
mod walkthroughs;
mod watch;
