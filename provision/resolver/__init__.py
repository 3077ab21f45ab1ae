"""resolve(profile, db) -> Plan: the newest stack in which every link holds, with a reason for every choice.

Pure: no I/O, no mutation of its inputs, versions compared with packaging.version. The links checked:
  * the driver branch drives the GPU (compute capability within the branch's range: compat.Branch.drives) and the
    OS packages it;
  * the driver runs the CUDA version, natively (branch CUDA >= planned CUDA) or through minor-version
    compatibility (driver >= the major's floor);
  * the CUDA toolkit can build for the GPU's compute capability;
  * cuDNN supports both the CUDA version and the compute capability;
  * each framework build contains kernels for the compute capability (SASS of the same major and a minor no
    newer, or PTX it can JIT), its bundled cuDNN supports the GPU, its Python range holds the OS's Python, and the
    CPU has the instructions its wheels use;
  * the OS (or PyPI) offers the packages.
Among the stacks that hold, the policy in data/policy.yaml decides (frameworks first, then CUDA, cuDNN, driver).

One module per concern:
  entry        resolve(): GPUs, count and interconnect, target checks, mixed GPU models; picks the lane
  links        the predicates above, one link each (a branch driving a GPU is compat.Branch.drives)
  context      the resolution context and the shape of a lane's answer
  stack        driver, CUDA and cuDNN: candidates, pin refusals, sub-plans (installed)
  platform     driver, CUDA and cuDNN a platform owns (Colab, Jetson): pin checks, sub-plans that install nothing
  frameworks   PyTorch and TensorFlow builds: candidates, refusals, FrameworkPlan
  installable  the lane for baremetal and cloud: enumerate stacks, rank them by policy
  colab        the lane for Colab: the runtime's stack, verified
  jetson       the lane for Jetson: JetPack's stack, verified
  common       what every plan gets: indexes, Python, NumPy, Jupyter, verifier, image, hardware warnings
"""

from provision.resolver.entry import resolve
from provision.resolver.links import has_kernels

__all__ = ["has_kernels", "resolve"]
