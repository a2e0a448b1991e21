//! The model without I/O: cron schedules, job files and the shipped
//! example job files. One test binary, a module per concern.

mod config_examples;
mod cron;
mod cron_reference;
mod jobfile;
