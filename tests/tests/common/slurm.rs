//! A real Slurm on this machine for a test: `slurmctld` and `slurmd` of Debian's
//! `slurm-wlm`, started by the test in the foreground with a configuration of its own (its own
//! ports, state and spool under the test's temporary directory), one node of 2 CPUs with 4
//! GPUs. The controller and the node are named by this machine's own host name with the
//! address 127.0.0.1 written beside it (`SlurmctldHost=name(127.0.0.1)`, `NodeAddr`), and
//! `slurmd` is told its node (`-N`): nothing looks the host name up. On a bare CI machine
//! whose `/etc/hosts` does not list its name, a lookup goes to a DNS server that may not
//! answer, and the node never registered within the test's wait. The GPUs are device files
//! `/dev/homebased-fake-gpu[0-3]` (Slurm only needs them to exist without cgroup device
//! constraints), so that Slurm allocates them and sets `CUDA_VISIBLE_DEVICES` as on a GPU
//! node; the home's fake `nvidia-smi` lists the same four cards. Authentication is `munged`, which `.ci/run` starts as it starts `dockerd`.
//!
//! The Slurm tests run one at a time (`.config/nextest.toml`, group `slurm`): one `slurmd` per
//! node name is what Slurm expects.

use super::http::free_port;
use super::wait_until;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

/// The fake GPUs' device files.
const GPUS: u32 = 4;

pub struct Slurm {
    dir: tempfile::TempDir,
    daemons: Vec<Child>,
}

fn fake_gpu(index: u32) -> PathBuf {
    PathBuf::from(format!("/dev/homebased-fake-gpu{index}"))
}

impl Slurm {
    /// Starts a cluster and waits until its node is idle.
    pub fn start() -> Slurm {
        // A socket left by a munged that is gone does not count (slurmctld then never
        // answers, and the wait below gives up without saying why): munge must make a
        // credential.
        let munge = Command::new("munge")
            .arg("-n")
            .stdout(Stdio::null())
            .output();
        assert!(
            munge.as_ref().is_ok_and(|out| out.status.success()),
            "munged is not running (.ci/run starts it): {munge:?}"
        );
        for index in 0..GPUS {
            let path = fake_gpu(index);
            if !path.exists() {
                // A character device of NVIDIA's major number, as a GPU node has.
                nix::sys::stat::mknod(
                    &path,
                    nix::sys::stat::SFlag::S_IFCHR,
                    nix::sys::stat::Mode::from_bits_truncate(0o666),
                    nix::sys::stat::makedev(195, u64::from(index)),
                )
                .unwrap_or_else(|e| panic!("cannot make {}: {e}", path.display()));
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let host = nix::unistd::gethostname()
            .expect("the host name")
            .to_string_lossy()
            .split('.')
            .next()
            .unwrap()
            .to_string();
        for sub in ["state", "spool", "log"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        let conf = format!(
            "ClusterName=hbtest\n\
             SlurmctldHost={host}(127.0.0.1)\n\
             AuthType=auth/munge\n\
             CredType=cred/munge\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd.pid\n\
             SlurmdSpoolDir={d}/spool\n\
             StateSaveLocation={d}/state\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             SlurmctldPort={ctld}\n\
             SlurmdPort={slurmd}\n\
             SlurmctldLogFile={d}/log/slurmctld.log\n\
             SlurmdLogFile={d}/log/slurmd.log\n\
             GresTypes=gpu\n\
             NodeName={host} NodeAddr=127.0.0.1 NodeHostname={host} CPUs=2 RealMemory=1000 Gres=gpu:{GPUS} State=UNKNOWN\n\
             PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP PriorityTier=1\n\
             PartitionName=urgent Nodes={host} MaxTime=INFINITE State=UP PriorityTier=2\n\
             PreemptType=preempt/partition_prio\n\
             PreemptMode=REQUEUE\n\
             ReturnToService=2\n\
             MpiDefault=none\n\
             SchedulerType=sched/backfill\n\
             JobCompType=jobcomp/none\n\
             AccountingStorageType=accounting_storage/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             MailProg=/bin/true\n",
            d = d.display(),
            ctld = free_port(),
            slurmd = free_port(),
        );
        std::fs::write(d.join("slurm.conf"), conf).unwrap();
        std::fs::write(
            d.join("gres.conf"),
            format!("Name=gpu File=/dev/homebased-fake-gpu[0-{}]\n", GPUS - 1),
        )
        .unwrap();
        let mut slurm = Slurm {
            dir,
            daemons: Vec::new(),
        };
        for (daemon, node) in [("slurmctld", None), ("slurmd", Some(&host))] {
            let out =
                std::fs::File::create(slurm.dir.path().join(format!("log/{daemon}.out"))).unwrap();
            let mut cmd = Command::new(daemon);
            cmd.args(["-D", "-f"]).arg(slurm.conf());
            if let Some(node) = node {
                cmd.args(["-N", node]);
            }
            let child = cmd
                .env("SLURM_CONF", slurm.conf())
                .stdin(Stdio::null())
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {daemon} (slurm-wlm): {e}"));
            slurm.daemons.push(child);
        }
        let started = std::time::Instant::now();
        loop {
            let out = slurm.run(&["sinfo", "--noheader", "-o", "%t"]);
            let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if state == "idle" {
                break;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "gave up after 30 s waiting for the Slurm node {host} to be idle: sinfo says \
                 {state:?} ({})\n{}",
                String::from_utf8_lossy(&out.stderr).trim(),
                slurm.logs()
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        slurm
    }

    pub fn conf(&self) -> PathBuf {
        self.dir.path().join("slurm.conf")
    }

    /// A Slurm client command (`sbatch`, `squeue`, `scontrol`, ...) of this cluster.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("SLURM_CONF", self.conf());
        cmd
    }

    pub fn run(&self, argv: &[&str]) -> Output {
        self.command(argv[0]).args(&argv[1..]).output().unwrap()
    }

    /// Submits a batch job (`sbatch --parsable ...`); answers its id.
    pub fn sbatch(&self, mut cmd: Command) -> String {
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "sbatch failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        id.split(';').next().unwrap().to_string()
    }

    /// The job's state as `squeue` says (`RUNNING`, `PENDING`, ...), or `None` once it left
    /// the queue.
    pub fn state(&self, job: &str) -> Option<String> {
        let out = self.run(&["squeue", "--noheader", "-j", job, "-o", "%T"]);
        let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (!state.is_empty()).then_some(state)
    }

    pub fn wait_state(&self, job: &str, want: Option<&str>) {
        wait_until(&format!("Slurm job {job} to be {want:?}"), || {
            self.state(job).as_deref() == want
        });
    }

    /// The slurmctld log, for a failure's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log/slurmctld.log")).unwrap_or_default()
    }

    /// Every log and output of both daemons, for a failure's message.
    fn logs(&self) -> String {
        ["slurmctld.log", "slurmctld.out", "slurmd.log", "slurmd.out"]
            .iter()
            .map(|name| {
                let text = std::fs::read_to_string(self.dir.path().join("log").join(name))
                    .unwrap_or_else(|e| format!("({e})"));
                format!("--- {name}\n{text}")
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Slurm {
    /// Cancels every job and waits (a little) for them to end before the daemons go: a
    /// `slurmstepd` whose controller is gone retries its completion for minutes.
    fn drop(&mut self) {
        let _ = self.run(&["scancel", "--user", "root"]);
        let until = std::time::Instant::now() + std::time::Duration::from_secs(15);
        while std::time::Instant::now() < until {
            let out = self.run(&["squeue", "--noheader", "-o", "%i"]);
            if out.status.success() && out.stdout.iter().all(u8::is_ascii_whitespace) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        for child in &mut self.daemons {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
