//! Helpers shared by the end-to-end tests (see tests/).
