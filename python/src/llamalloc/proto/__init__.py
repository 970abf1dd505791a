"""pprof's profile.proto (vendored from github.com/google/pprof, Apache-2.0) and its generated module.

profile_pb2.py was generated with `protoc --python_out=. profile.proto` (protoc 3.21, the Debian 12 package
protobuf-compiler); that style of generated code (descriptor pool + builder) runs on every protobuf runtime from
3.20 on, including the 5.x, 6.x and 7.x lines, so it is committed rather than generated at install time.
Regenerate it the same way if profile.proto changes.
"""
