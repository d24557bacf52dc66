//! The report's arithmetic and its table: latency statistics, and the
//! markdown tables printed from the run's JSON figures (main.rs assembles
//! them). Prints to stdout only what the figures hold.

use serde_json::json;

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)] as f64
}

pub(super) fn stats(latencies: &[u64]) -> serde_json::Value {
    let mut s = latencies.to_vec();
    s.sort_unstable();
    let mean = s.iter().sum::<u64>() as f64 / s.len().max(1) as f64;
    json!({
        "min_ms": s.first().map_or(f64::NAN, |v| *v as f64 / 1e3),
        "p50_ms": percentile(&s, 50.0) / 1e3,
        "mean_ms": mean / 1e3,
        "max_ms": s.last().map_or(f64::NAN, |v| *v as f64 / 1e3),
    })
}

pub(super) fn num(v: &serde_json::Value, key: &str) -> f64 {
    v.get(key)
        .and_then(serde_json::Value::as_f64)
        .unwrap_or(f64::NAN)
}

pub(super) fn mib(kib: Option<u64>) -> f64 {
    kib.map_or(f64::NAN, |k| k as f64 / 1024.0)
}

pub(super) fn print_table(f: &serde_json::Value) {
    let d = &f["direct"];
    let k = &f["through_kshim"];
    let ks = &f["kshim"];
    let r = &f["ratios_kshim_over_direct"];
    println!(
        "Metadata v{} for every topic: {} brokers, {} topics, {} partitions (RF {}), {} client(s), {} rounds",
        f["version"], f["brokers"], f["topics"], f["partitions"], f["replication"], f["clients"], f["rounds"]
    );
    println!();
    println!("| | direct | kshim | kshim/direct |");
    println!("|---|---:|---:|---:|");
    println!(
        "| answer bytes | {} | {} | {:.2}x |",
        d["answer_bytes"],
        k["answer_bytes"],
        num(r, "answer_bytes")
    );
    for (label, key) in [
        ("latency p50 ms", "p50_ms"),
        ("latency mean ms", "mean_ms"),
        ("latency min ms", "min_ms"),
        ("latency max ms", "max_ms"),
    ] {
        let ratio_key = key.trim_end_matches("_ms");
        println!(
            "| {label} | {:.1} | {:.1} | {:.2}x |",
            num(&d["latency"], key),
            num(&k["latency"], key),
            num(r, ratio_key)
        );
    }
    let warm = |v: &serde_json::Value| {
        v["warmup_us"]
            .as_array()
            .and_then(|a| a.iter().filter_map(serde_json::Value::as_u64).max())
            .map_or(f64::NAN, |u| u as f64 / 1e3)
    };
    println!(
        "| first round (unmeasured), slowest ms | {:.1} | {:.1} | |",
        warm(d),
        warm(k)
    );
    println!();
    println!("| kshim | |");
    println!("|---|---:|");
    println!(
        "| start to listening address printed, s | {:.2} |",
        num(ks, "start_to_listening_s")
    );
    println!(
        "| start to /readyz 200, s | {:.2} |",
        num(ks, "start_to_ready_s")
    );
    println!("| CPU to ready, s | {:.2} |", num(ks, "cpu_to_ready_s"));
    println!(
        "| listening ports (broker listeners) | {} ({}) |",
        ks["listening_ports"], ks["broker_listeners"]
    );
    println!(
        "| descriptors at ready / with clients | {} / {} |",
        ks["fds_ready"], ks["fds_with_clients"]
    );
    println!(
        "| RSS at ready / after the rounds / peak, MiB | {:.1} / {:.1} / {:.1} |",
        num(ks, "rss_ready_mib"),
        num(ks, "rss_after_mib"),
        num(ks, "peak_rss_mib")
    );
    println!(
        "| CPU per Metadata request, ms (schedstat; utime+stime) | {:.1}; {:.1} |",
        num(ks, "cpu_ms_per_request_schedstat"),
        num(ks, "cpu_ms_per_request")
    );
    println!(
        "| CPU per partition per request, ns | {:.1} |",
        num(ks, "cpu_ns_per_partition")
    );
    println!(
        "| minor page faults per request | {:.0} |",
        num(ks, "minor_faults_per_request")
    );
    println!(
        "| CPU while idle, ms/s ({} refreshes in {:.0} s; ms per refresh) | {:.2} ({:.1}) |",
        ks["idle_refreshes"],
        num(ks, "idle_s"),
        num(ks, "idle_cpu_ms_per_s"),
        num(ks, "cpu_ms_per_idle_refresh")
    );
    println!(
        "| its own Metadata refreshes during the kshim rounds | {} |",
        ks["own_metadata_refreshes_during_kshim_rounds"]
    );
    let m = &f["machine_during_rounds"];
    println!(
        "| during the rounds ({:.1} s): CPU s of kshim / clients and fake / other processes | {:.2} / {:.2} / {:.2} |",
        num(m, "wall_s"),
        num(m, "kshim_cpu_s"),
        num(m, "clients_and_fake_cpu_s"),
        num(m, "other_processes_cpu_s")
    );
    let c = &f["checks"];
    println!();
    println!(
        "checks: {} brokers named, {} at kshim's listeners ({} distinct ports), {} partitions, topics equal to direct: {}",
        c["brokers_named"],
        c["brokers_at_kshim_listeners"],
        c["distinct_broker_ports"],
        c["partitions_through_kshim"],
        c["topics_equal_direct"]
    );
}
