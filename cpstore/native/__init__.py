"""The low level: cffi binding, argument checks, reference twins, record formats, encoding."""
