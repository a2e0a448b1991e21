//! The engine's rules, each on a virtual clock (`ax_engine::sim::Sim`): one
//! test binary, a module per concern.

mod chaos;
mod clock;
mod cluster;
mod crash_paths;
mod lifecycle;
mod manual_trigger;
mod reattach;
mod reload;
mod retries;
mod rules;
mod triggers;
