pub mod cidr;
pub mod config;
pub mod daemon;
pub mod demo;
pub mod keys;
pub mod netem;
pub mod show;
pub mod uapi;
