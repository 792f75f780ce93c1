//! Plain data and pure parsers shared by every layer: no I/O, no knowledge of the live process.

pub mod consts;
pub mod duration;
