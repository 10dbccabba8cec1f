"""The compiled modules (Cython): the Kafka listener's record codec
(storage_node/kafka/record_codec.pyx) and the columnar read's per-row kernel
(storage_node/formats/read_kernel.pyx); everything else is in pyproject.toml.

``pip install -e .`` (make venv) builds them next to their sources; the wheel the images
install carries them built (scripts/build-images.sh)."""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [
            Extension("storage_node.kafka.record_codec", ["storage_node/kafka/record_codec.pyx"]),
            Extension("storage_node.formats.read_kernel", ["storage_node/formats/read_kernel.pyx"]),
        ],
        language_level=3,
    )
)
