"""Hand-built Plans with the values the resolver is expected to produce (shared brief, "Expected plans").

They let renderer and image tests run before, and independently of, the live compat data: a data refresh
must not break a template test. `real_plan()` returns the resolver's plan for a shipped profile.
Keep this module additive: other tests import these builders.
"""

from __future__ import annotations

from typing import Any

from provision.models import (
    CPUPlan,
    CudaPlan,
    CudnnPlan,
    DriverPlan,
    FrameworkPlan,
    GPUPlan,
    ImagePlan,
    JupyterPlan,
    Plan,
    PythonPlan,
    Reason,
    TargetPlan,
    VerifyPlan,
)

JUPYTER_REQS = ("jupyterlab==4.4.10",)
NUMPY = "numpy==2.3.5"
REASON = Reason(component="fixture", choice="hand-built", why="test fixture", source="tests/support/plans.py")


def _jupyter(**kw: Any) -> JupyterPlan:
    return JupyterPlan(**{"enabled": True, "port": 8888, "bind": "127.0.0.1", "auth": "token", "tls": False,
                          "requirements": JUPYTER_REQS, **kw})


def deskmini(**image: Any) -> Plan:
    """GTX 1070 (sm_61) with the OS overridden to debian-13; CUDA 12.6 and cuDNN 9.10 from PyPI wheels."""
    return Plan(
        profile="deskmini",
        profile_path="profiles/deskmini.yaml",
        target=TargetPlan(kind="baremetal", distribution="debian", release="13", codename="trixie", os_id="debian-13",
                          arch="x86_64"),
        gpu=GPUPlan(model="GeForce GTX 1070", arch="Pascal", chip="GP104", compute_capability="6.1", sm="sm_61",
                    count=1, memory_gb=8, bandwidth_gbps=256, fp32_tflops=6.5, fp16_tflops=0.1, fp64_tflops=0.2,
                    tegra=False),
        cpu=CPUPlan(model="Intel Pentium G4600", flags=("sse4_1", "sse4_2")),
        driver=DriverPlan(install=True, branch="550", source="debian",
                          packages=("firmware-nvidia-gsp", "nvidia-driver", "nvidia-kernel-dkms"),
                          userspace_packages=("libcuda1", "libnvidia-ml1", "nvidia-smi"), version="550.163.01-2",
                          max_cuda="12.4", min_version="525.60.13", kernel_module="proprietary"),
        cuda=CudaPlan(version="12.6", full_version="12.6.77", source="pypi", kind="runtime", install=True,
                      packages=("nvidia-cuda-nvrtc-cu12==12.6.85", "nvidia-cuda-runtime-cu12==12.6.77"),
                      home="/opt/provision/venv/lib/python3.13/site-packages/nvidia/cuda_runtime"),
        cudnn=CudnnPlan(version="9.10.2", full_version="9.10.2.21", source="pypi", install=True,
                        packages=("nvidia-cudnn-cu12==9.10.2.21",)),
        python=PythonPlan(version="3.13", source="system", interpreter="/usr/bin/python3",
                          packages=("python3", "python3-venv"), venv="/opt/provision/venv"),
        frameworks=(FrameworkPlan(name="pytorch", package="torch", version="2.6.0", variant="cu126",
                                  index_url="https://download.pytorch.org/whl/cu126",
                                  requirements=("torch==2.6.0+cu126",), cuda="12.6", cudnn="9.5.1",
                                  arch_list=("5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "9.0")),),
        jupyter=_jupyter(),
        verify=VerifyPlan(expect_gpu=True, target_arch="sm_61", nvrtc_requirements=("nvidia-cuda-nvrtc-cu12==12.6.85",),
                          cuda_python_requirements=(), numpy_requirement=NUMPY),
        image=ImagePlan(**{"base_image": "nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04", "platform": "linux/amd64",
                           "devel": False, "apt_packages": ("ca-certificates",), **image}),
        user="ml",
        reasons=(REASON,),
        warnings=(),
    )


def aws_p2(**image: Any) -> Plan:
    """Tesla K80 (sm_37) on debian-12; CUDA 11.8 and cuDNN 8.5 from cu11 wheels; PyTorch 2.0.1 from PyPI."""
    return Plan(
        profile="aws-p2",
        profile_path="profiles/aws-p2.yaml",
        target=TargetPlan(kind="cloud", distribution="debian", release="12", codename="bookworm", os_id="debian-12",
                          arch="x86_64", instance_type="p2.xlarge"),
        gpu=GPUPlan(model="Tesla K80", arch="Kepler", chip="GK210", compute_capability="3.7", sm="sm_37", count=1,
                    memory_gb=12, bandwidth_gbps=240, fp32_tflops=4.1, fp16_tflops=None, fp64_tflops=1.4, tegra=False),
        cpu=CPUPlan(model="Intel Xeon E5-2686 v4", flags=("avx", "avx2", "sse4_2")),
        driver=DriverPlan(install=True, branch="470", source="debian",
                          packages=("nvidia-tesla-470-driver",),
                          userspace_packages=("libnvidia-tesla-470-cuda1", "libnvidia-tesla-470-ml1",
                                              "nvidia-tesla-470-smi"),
                          version="470.256.02-1~deb12u1", max_cuda="11.4", min_version="450.80.02",
                          kernel_module="proprietary"),
        cuda=CudaPlan(version="11.8", full_version="11.8.89", source="pypi", kind="runtime", install=True,
                      packages=("nvidia-cuda-nvrtc-cu11==11.8.89", "nvidia-cuda-runtime-cu11==11.8.89"),
                      home="/opt/provision/venv/lib/python3.11/site-packages/nvidia/cuda_runtime"),
        cudnn=CudnnPlan(version="8.5.0", full_version="8.5.0.96", source="pypi", install=True,
                        packages=("nvidia-cudnn-cu11==8.5.0.96",)),
        python=PythonPlan(version="3.11", source="system", interpreter="/usr/bin/python3",
                          packages=("python3", "python3-venv"), venv="/opt/provision/venv"),
        frameworks=(FrameworkPlan(name="pytorch", package="torch", version="2.0.1", variant="cu117", index_url=None,
                                  requirements=("torch==2.0.1",), cuda="11.7", cudnn="8.5.0",
                                  arch_list=("3.7", "5.0", "6.0", "7.0", "7.5", "8.0", "8.6")),),
        jupyter=_jupyter(),
        verify=VerifyPlan(expect_gpu=True, target_arch="sm_37", nvrtc_requirements=("nvidia-cuda-nvrtc-cu11==11.8.89",),
                          cuda_python_requirements=(), numpy_requirement="numpy==1.26.4"),
        image=ImagePlan(**{"base_image": "nvidia/cuda:11.8.0-cudnn8-runtime-ubuntu22.04", "platform": "linux/amd64",
                           "devel": False, "apt_packages": ("ca-certificates",), **image}),
        user="ml",
        reasons=(REASON,),
        warnings=(),
    )


def jetson_orin_nano(**image: Any) -> Plan:
    """Orin Nano (sm_87), JetPack 6.2: everything from the platform; an arm64 L4T image."""
    return Plan(
        profile="jetson-orin-nano",
        profile_path="profiles/jetson-orin-nano.yaml",
        target=TargetPlan(kind="jetson", distribution="ubuntu", release="22.04", codename="jammy", os_id="ubuntu-22.04",
                          arch="aarch64", jetpack="6.2", l4t="36.4.3"),
        gpu=GPUPlan(model="Jetson Orin Nano 8GB", arch="Ampere", chip="GA10B", compute_capability="8.7", sm="sm_87",
                    count=1, memory_gb=8, bandwidth_gbps=102, fp32_tflops=1.3, fp16_tflops=2.6, fp64_tflops=None,
                    tegra=True),
        cpu=CPUPlan(model="Arm Cortex-A78AE", flags=("asimd",)),
        driver=DriverPlan(install=False, branch=None, source="platform", packages=(), userspace_packages=(),
                          version=None, max_cuda="12.6", min_version=None, kernel_module="platform"),
        cuda=CudaPlan(version="12.6", full_version=None, source="platform", kind="toolkit", install=False, packages=(),
                      home="/usr/local/cuda"),
        cudnn=CudnnPlan(version="9.3.0", full_version=None, source="platform", install=False, packages=()),
        python=PythonPlan(version="3.10", source="system", interpreter="/usr/bin/python3",
                          packages=("python3", "python3-venv"), venv="/opt/provision/venv"),
        frameworks=(FrameworkPlan(name="pytorch", package="torch", version="2.5.0", variant="jetpack",
                                  index_url="https://pypi.jetson-ai-lab.dev/jp6/cu126",
                                  requirements=("torch==2.5.0",), cuda="12.6", cudnn="9.3.0", arch_list=("8.7",)),),
        jupyter=_jupyter(),
        verify=VerifyPlan(expect_gpu=True, target_arch="sm_87", nvrtc_requirements=(),
                          cuda_python_requirements=(), numpy_requirement="numpy==1.26.4"),
        image=ImagePlan(**{"base_image": "nvcr.io/nvidia/l4t-jetpack:r36.4.0", "platform": "linux/arm64",
                           "devel": False, "apt_packages": ("ca-certificates",), **image}),
        user="ml",
        reasons=(REASON,),
        warnings=(),
    )


HAND_BUILT = {"deskmini": deskmini, "aws-p2": aws_p2, "jetson-orin-nano": jetson_orin_nano}


def real_plan(profile: str, os_override: str | None = None) -> Plan:
    """The resolver's plan for the shipped profiles/<profile>.yaml."""
    from provision.pipeline.plan import plan_for
    from provision.resources import share_dir

    return plan_for(str(share_dir("profiles") / f"{profile}.yaml"), os_override=os_override)
