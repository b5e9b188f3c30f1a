"""API routes of quotas, mounted under /api/v1/ by console.urls."""

from rest_framework.routers import SimpleRouter

from quotas.api.views import AuditLogViewSet, NodeViewSet, PoolViewSet, QuotaViewSet

router = SimpleRouter(trailing_slash=True)
router.register("pools", PoolViewSet, basename="pool")
router.register("nodes", NodeViewSet, basename="node")
router.register("quotas", QuotaViewSet, basename="quota")
router.register("audit-log", AuditLogViewSet, basename="audit-log")

urlpatterns = router.urls
