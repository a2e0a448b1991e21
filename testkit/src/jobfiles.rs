//! Job files of a given size, for tests and benchmarks of the jobs folder.

/// A valid job file of at least `bytes` bytes: a chain of jobs (each after
/// the one before) with commands of about 100 bytes, so parsing, the dep
/// check and the cycle check all scale with the size. Returns the text and
/// the number of jobs.
pub fn chain_of_bytes(bytes: usize) -> (String, usize) {
    let mut text = String::with_capacity(bytes + 256);
    let mut n = 0;
    while text.len() < bytes {
        text.push_str(&format!(
            "[[job]]\nid = \"j{n}\"\ncommand = \"echo job {n} of a long chain, padded to about a hundred bytes of shell\"\n"
        ));
        if n > 0 {
            text.push_str(&format!("deps = [\"j{}\"]\n", n - 1));
        }
        n += 1;
    }
    (text, n)
}

/// `n` small valid job files `(path in the jobs folder, text)`, 100 to a
/// sub-folder: a big folder of ordinary DAGs.
pub fn many_small(n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| {
            (
                format!("team-{}/dag-{i}.toml", i / 100),
                format!(
                    "description = \"DAG {i}\"\n[[job]]\nid = \"fetch\"\ncommand = \"true\"\n[[job]]\nid = \"load\"\ncommand = \"true\"\ndeps = [\"fetch\"]\n"
                ),
            )
        })
        .collect()
}
