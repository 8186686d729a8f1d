"""pxclient: picks the client the integration tests drive the daemons with:
pctl when the build has it, else the gRPC stubs of pxcluster.Grpc."""
import os

import pxcluster as pc


def make_client(args, daemon):
    if args.pctl and os.access(args.pctl, os.X_OK):
        from pxpctl import Pctl
        return Pctl(args.pctl, daemon, args.proto)
    return pc.Grpc(daemon, args.proto)
