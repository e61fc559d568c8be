//! latlab-sfu as a library: the SFU's parts, for its programs (`latlab-sfu`, the
//! light participants of `latlab-sfu-load`) and its tests.

pub mod alloc;
pub mod args;
pub mod forward;
pub mod http;
pub mod load;
pub mod logger;
pub mod net;
pub mod probe;
pub mod sfu;
