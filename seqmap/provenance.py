"""Where and with what a run was trained: recorded in its run directory, compared where it is scored.

    RUN_DIR/provenance.json   seqmap (and its git commit), Python, torch and library versions, the CPU,
                              the kernels torch runs on it, threads, device; written when a run starts

The same facts open ``train.log`` (``log_lines``), and a resumed run appends the machine it resumed on
there, keeping the file of the machine it started on. Floating-point results repeat to the last digit
only with the same CPU kind, kernels, torch and device, so ``seqmap evaluate`` says when the run it
scores was trained on another (``evaluation_note``). Standard library and torch only: training and
evaluation both read it.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import torch

from seqmap import __version__

PROVENANCE_FILE = "provenance.json"
LIBRARIES = ("numpy", "sentencepiece", "tokenizers", "transformers", "ctranslate2")  # recorded where installed
# what makes floating-point results differ in the last digits (threads too, but evaluation picks its own)
MACHINE_FIELDS = ("cpu", "cpu_family", "cpu_model", "isa", "torch", "device_type", "gpu")


class ProvenanceError(ValueError):
    """A provenance file that cannot be read; the message names it."""


@dataclass(frozen=True)
class Provenance:
    seqmap: str  # seqmap.__version__
    git_commit: str | None  # HEAD of the checkout seqmap was imported from (None: an installed package)
    git_dirty: bool | None  # files changed or added since that commit (those .gitignore names aside)
    python: str
    torch: str  # torch.__version__
    libraries: dict[str, str]  # LIBRARIES that are installed -> version
    cpu: str  # the model name (/proc/cpuinfo), else what the platform says, else "unknown"
    cpu_family: int | None  # x86 family and model: one model name can cover CPUs with different vector units
    cpu_model: int | None
    isa: str  # the vector instructions torch's CPU kernels use (AVX512, AVX2, DEFAULT, ...)
    threads: int  # torch's intra-op threads
    device: str  # e.g. cpu, cuda:0
    device_type: str  # cpu, cuda, ...
    gpu: str | None  # the GPU's name on CUDA

    def machine(self) -> str:
        """One phrase for the machine: CPU, kernels, torch, device."""
        cpu = self.cpu if self.cpu_family is None else f"{self.cpu} (family {self.cpu_family} model {self.cpu_model})"
        device = self.device if self.gpu is None else f"{self.device} ({self.gpu})"
        return f"{cpu}, {self.isa} kernels, torch {self.torch}, {device}"


def cpu_identity() -> tuple[str, int | None, int | None]:
    """(model name, family, model) of the first processor in /proc/cpuinfo; the platform's name (and no family)
    where that file or its fields are missing."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor is enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine() or "unknown"

    def number(key: str) -> int | None:
        return int(fields[key]) if fields.get(key, "").isdigit() else None

    return name, number("cpu family"), number("model")


def git_state(package_dir: Path) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git checkout holding ``package_dir`` at its top; (None, None) for an installed
    package, or where git is missing or fails."""
    root = package_dir.parent
    if not (root / ".git").exists():  # a file in a worktree, a folder in a clone
        return None, None
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "--no-optional-locks", "-C", str(root), "status", "--porcelain"],
                                capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit or None, bool(status.strip())


def library_versions() -> dict[str, str]:
    """The installed ``LIBRARIES`` and their versions, from their package metadata (nothing is imported)."""
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def collect(device: torch.device, *, git: bool = True) -> Provenance:
    """This process's provenance, training or evaluating on ``device`` (``git=False``: no commit asked for, where
    only the machine is compared)."""
    device = torch.device(device)
    commit, dirty = git_state(Path(__file__).resolve().parent) if git else (None, None)
    cpu, family, model = cpu_identity()
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return Provenance(seqmap=__version__, git_commit=commit, git_dirty=dirty, python=platform.python_version(),
                      torch=torch.__version__, libraries=library_versions(), cpu=cpu, cpu_family=family,
                      cpu_model=model, isa=torch.backends.cpu.get_cpu_capability(), threads=torch.get_num_threads(),
                      device=str(device), device_type=device.type, gpu=gpu)


def write(provenance: Provenance, run_dir: Path) -> Path:
    """``provenance`` as RUN_DIR/provenance.json; its path."""
    path = Path(run_dir) / PROVENANCE_FILE
    path.write_text(json.dumps(dataclasses.asdict(provenance), indent=2, ensure_ascii=False) + "\n",
                    encoding="utf-8")
    return path


def read(run_dir: Path) -> Provenance | None:
    """RUN_DIR/provenance.json; None when there is none (a run of a seqmap that did not write it). Fields a later
    seqmap adds are ignored; a file that is not JSON or lacks a field is a ProvenanceError naming it."""
    path = Path(run_dir) / PROVENANCE_FILE
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ProvenanceError(f"{path} cannot be read ({err})") from None
    if not isinstance(saved, dict):
        raise ProvenanceError(f"{path} cannot be read (it holds a {type(saved).__name__}, not an object)")
    names = [f.name for f in dataclasses.fields(Provenance)]
    missing = [name for name in names if name not in saved]
    if missing:
        raise ProvenanceError(f"{path} cannot be read (it has no {missing[0]!r} field)")
    return Provenance(**{name: saved[name] for name in names})


def differs(a: Provenance, b: Provenance) -> list[str]:
    """The ``MACHINE_FIELDS`` in which ``a`` and ``b`` differ."""
    return [name for name in MACHINE_FIELDS if getattr(a, name) != getattr(b, name)]


def log_lines(provenance: Provenance, *, resume: bool) -> list[str]:
    """The short block that opens ``train.log`` (and is appended when the run resumes)."""
    p = provenance
    git = ("" if p.git_commit is None else
           f" (git {p.git_commit[:12]}{', with uncommitted changes' if p.git_dirty else ''})")
    libraries = ", ".join(f"{name} {version}" for name, version in p.libraries.items())
    head = "run resumed on" if resume else "run started on"
    saved = "" if resume else f" (saved in {PROVENANCE_FILE})"
    return [f"{head} {p.machine()}, {p.threads} threads{saved}",
            f"seqmap {p.seqmap}{git}, Python {p.python}" + (f", {libraries}" if libraries else "")]


def record_run(run_dir: Path, device: torch.device, info: Callable[[str], None], *, resume: bool) -> Provenance:
    """At the start of a run: log the block and write RUN_DIR/provenance.json. A resumed run logs the machine it
    resumes on and keeps the file of the machine it started on (a run without one keeps none: where it started
    is unknown)."""
    here = collect(device)
    for line in log_lines(here, resume=resume):
        info(line)
    if not resume:
        write(here, run_dir)
        return here
    try:
        started = read(run_dir)
    except ProvenanceError:
        started = None  # evaluate names the damaged file
    if started is not None and differs(started, here):
        info(f"the run started on {started.machine()}: from here its numbers may differ in the last digits "
             "from a run on one machine")
    return here


def run_dir_of(checkpoint: Path) -> Path | None:
    """The run directory holding ``checkpoint`` (RUN_DIR/checkpoints/step-N), or None for a checkpoint elsewhere."""
    checkpoint = Path(checkpoint)
    return checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else None


def evaluation_note(checkpoint: Path, device: torch.device) -> str | None:
    """One line for ``seqmap evaluate``: a note when the run of ``checkpoint`` was trained on another CPU kind,
    kernels, torch or device than this one, a warning when its provenance file is damaged, else None."""
    run_dir = run_dir_of(checkpoint)
    if run_dir is None:
        return None
    try:
        trained = read(run_dir)
    except ProvenanceError as err:
        return f"warning: {err}; it records where the run was trained: restore it, or delete it to skip this check"
    if trained is None:
        return None
    here = collect(device, git=False)
    if not differs(trained, here):
        return None
    return (f"note: this run was trained on {trained.machine()}; this is {here.machine()}: scores here may differ "
            "in the last digits")
