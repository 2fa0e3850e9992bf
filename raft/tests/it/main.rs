//! quiver-raft's storage checked by openraft's own storage test suite, plus crash and
//! restart behaviour of the log store.

mod log_store;
mod sim;
mod suite;
