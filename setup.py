"""The one compiled module, the Kafka listener's record codec
(storage_node/kafka/record_codec.pyx, Cython); everything else is in pyproject.toml.

``pip install -e .`` (make venv) builds it next to its source; the wheel the images install
carries it built (scripts/build-images.sh)."""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [Extension("storage_node.kafka.record_codec", ["storage_node/kafka/record_codec.pyx"])],
        language_level=3,
    )
)
