//! lockstep: restore milvus-backup backups into a CDC-replicating Milvus.
