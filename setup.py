"""The one native part: records decoded into Arrow buffers (odradek.records._columnar).

``optional=True``: without a C compiler the install still succeeds and
odradek.records.columnar falls back to its pure-Python builder.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "odradek.records._columnar",
            ["src/odradek/records/_columnar.c"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-missing-field-initializers"],
            optional=True,
        )
    ]
)
