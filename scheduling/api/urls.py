"""API routes of scheduling, mounted under /api/v1/ by console.urls."""

from rest_framework.routers import SimpleRouter

router = SimpleRouter(trailing_slash=True)

urlpatterns = router.urls
