import sys
from kafka.admin import KafkaAdminClient
from kafka.admin._cluster import UpdateFeatureType
from kafka.protocol.admin import UpdateFeaturesRequest
import kafka
print("kafka-python", kafka.__version__)
a = KafkaAdminClient(bootstrap_servers=sys.argv[1], request_timeout_ms=10000)
print(a.describe_features())
mode = sys.argv[2]
if mode == "api":
    print(a.update_features({"group.version": (UpdateFeatureType.SAFE_DOWNGRADE, 0)}))
    print(a.update_features({"group.version": 1}))
    try:
        print(a.update_features({"group.version": 9}))
    except Exception as e:
        print("fail:", type(e).__name__, e)
elif mode == "pinned":
    K = UpdateFeaturesRequest.FeatureUpdateKey
    def send(ver, feature, level, downgrade, utype, validate_only=False):
        req = UpdateFeaturesRequest(timeout_ms=30000, feature_updates=[K(feature=feature, max_version_level=level,
                 allow_downgrade=downgrade, upgrade_type=utype)], validate_only=validate_only,
                 min_version=ver, max_version=ver)
        try:
            r = a._manager.run(a._send_request_to_controller, req, lambda r: [], False)
            print("v%d" % ver, r)
        except Exception as e:
            print("v%d fail:" % ver, type(e).__name__, e)
    send(1, "group.version", 0, True, 2)        # v1 SAFE_DOWNGRADE 1 -> 0
    send(0, "group.version", 1, False, 1)       # v0 upgrade 0 -> 1
    send(0, "group.version", 0, True, 2)        # v0 AllowDowngrade=true 1 -> 0
    send(0, "group.version", 9, False, 1)       # v0 invalid level
    send(1, "group.version", 0, True, 2, validate_only=True)  # v1 validate-only downgrade
    send(1, "group.version", 1, False, 1)       # v1 same level (no-op)
    send(1, "group.version", 9, False, 1)       # v1 invalid level
print(a.describe_features())
a.close()
