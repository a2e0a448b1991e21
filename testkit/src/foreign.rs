//! A client of another uid (65534, via `setpriv`, which needs root): what
//! axd's access rules see from a stranger on the same machine.

use std::io;
use std::path::Path;
use std::process::{Command, Output};

/// Connects to `socket` as uid 65534 and sends `hello`. Its stdout is axd's
/// answer line, or `connect-refused: REASON` when the connect itself was
/// refused.
pub fn foreign_hello(socket: &Path) -> io::Result<Output> {
    let script = format!(
        r#"use IO::Socket::UNIX; my $s = IO::Socket::UNIX->new(Peer => "{}") or do {{ print "connect-refused: $!"; exit 0 }}; print $s qq({{"jsonrpc":"2.0","id":1,"method":"hello","params":{{"protocol":1,"client":"intruder"}}}}\n); my $l = <$s>; print $l;"#,
        socket.display()
    );
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "perl",
            "-e",
            &script,
        ])
        .output()
}
