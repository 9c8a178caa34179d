# Sourced by the GPU scripts beside it, from the repository root: PY (the Python to run, $PYTHON or python3), no
# rendering, unbuffered output, herl from src/, and the packages a bare GPU machine lacks taken from .wheels in .whl/
# when one of the modules in GPU_NEEDS (default: gymnasium, gymnasium_robotics, mujoco) is missing. Make the wheels
# where pip can reach the package index, for that machine's Python, e.g. 3.12:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#     gymnasium==1.4.0 farama-notifications==0.0.6 gymnasium-robotics==1.4.2 mujoco==3.11.0 pettingzoo glfw pyopengl \
#     mujoco-mjx==3.11.0 trimesh
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 MUJOCO_GL=disable  # no rendering here; EGL may be absent
if ! "$PY" -c "import ${GPU_NEEDS:-gymnasium, gymnasium_robotics, mujoco}" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
