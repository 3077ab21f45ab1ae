"""The compatibility database: typed, validated views of the data files in provision/data/.

Every row carries `source` (URL) and `checked` (date). Nothing here decides anything; `provision.resolver` does.
`load_db()` reads the shipped data; tests build small `CompatDB` objects from fixture tables instead.

Its parts: rows.py and containers.py (the row types), db.py (CompatDB and its look-ups), devices.py (NVIDIA's
driver lists), files.py (reading a data file, the cache's key), load.py (load_db). Every name other code uses is
imported here: `from provision.compat import GPU, CompatDB, load_db` keeps working.
"""

from __future__ import annotations

from provision.compat.containers import (
    CdiSupport,
    ContainerEngine,
    ContainerFact,
    Containers,
    ContainerToolkit,
    DockerCE,
    EngineRow,
    JetpackContainers,
    NotPackaged,
)
from provision.compat.db import CompatDB
from provision.compat.devices import Device, DeviceTable, device_gpu, device_table, list_entries
from provision.compat.files import DataError
from provision.compat.load import _read_db, load_db
from provision.compat.rows import (
    GPU,
    MVC,
    Architecture,
    BaseImage,
    Branch,
    ColabFramework,
    ColabRuntime,
    CudaPkg,
    Cudnn,
    DriverPkg,
    FabricManager,
    HostPath,
    HostUnit,
    Installer,
    InstallerWheel,
    Instance,
    JaxRow,
    JetPack,
    JetsonTorch,
    KernelModule,
    NvidiaRepo,
    NvidiaRepoEntry,
    OSRow,
    Policy,
    PypiCuda,
    PypiCudnn,
    PypiReleases,
    PythonBuild,
    TFRow,
    Tool,
    Toolkit,
    TorchRow,
    _Row,
)
from provision.versions import V

__all__ = [
    "GPU", "MVC", "Architecture", "BaseImage", "Branch", "CdiSupport", "ColabFramework", "ColabRuntime", "CompatDB",
    "ContainerEngine", "ContainerFact", "ContainerToolkit", "Containers", "CudaPkg", "Cudnn", "DataError", "Device",
    "DeviceTable", "DockerCE", "DriverPkg", "EngineRow", "FabricManager", "HostPath", "HostUnit", "Installer",
    "InstallerWheel", "Instance", "JaxRow", "JetPack", "JetpackContainers", "JetsonTorch", "KernelModule",
    "NotPackaged", "NvidiaRepo", "NvidiaRepoEntry", "OSRow", "Policy", "PypiCuda", "PypiCudnn", "PypiReleases",
    "PythonBuild", "TFRow", "Tool", "Toolkit", "TorchRow", "V", "device_gpu", "device_table", "list_entries", "load_db",
    # Private, imported by name elsewhere: _Row by provision.resolver.gpu_operator, _read_db by scripts/ and tests/.
    "_Row", "_read_db",
]
