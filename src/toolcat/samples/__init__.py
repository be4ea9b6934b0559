"""Working implementations of the sample catalog in ``data/toolkits``.

Each module is one toolkit; its manifest is generated with
``toolcat manifest --module toolcat.samples.NAME``. Nothing in toolcat imports these modules
except the runtime, on a tool's first call.
"""
